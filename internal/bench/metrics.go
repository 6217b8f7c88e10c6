package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Counters read from the nodes' Prometheus endpoints around a measurement.
const (
	metricPeerMessages = "tyr_peer_messages_sent_total"
	metricPeerCalls    = "tyr_peer_deliver_calls_total"
	metricSyncs        = "tyr_wal_syncs_total"
	metricOps          = "tyr_ops_total"
)

// servedOps are the client requests a measurement's operations arrive as:
// writes are Commit calls and reads are Read calls. A read one node
// forwards to another is counted by both.
var servedOps = []string{`op="Commit"`, `op="Read"`}

// metricsSettle is how long the counters are left to settle after a
// measurement before they are read: the chain messages that finish the
// last commits may follow their acknowledgement.
const metricsSettle = 300 * time.Millisecond

// clusterCounts are counters summed over every node of a cluster.
type clusterCounts struct {
	peerMessages, peerCalls, served, syncs float64
}

// scrapeCluster reads the counters of every node in addrs.
func scrapeCluster(ctx context.Context, addrs []string) (clusterCounts, error) {
	var total clusterCounts
	for _, addr := range addrs {
		c, err := scrapeNode(ctx, addr)
		if err != nil {
			return clusterCounts{}, err
		}
		total.peerMessages += c.peerMessages
		total.peerCalls += c.peerCalls
		total.served += c.served
		total.syncs += c.syncs
	}
	return total, nil
}

func scrapeNode(ctx context.Context, addr string) (clusterCounts, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return clusterCounts{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return clusterCounts{}, fmt.Errorf("metrics of %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return clusterCounts{}, fmt.Errorf("metrics of %s: %s", addr, resp.Status)
	}
	c, seen, err := parseCounts(bufio.NewScanner(resp.Body))
	if err != nil {
		return clusterCounts{}, fmt.Errorf("metrics of %s: %w", addr, err)
	}
	if !seen {
		return clusterCounts{}, fmt.Errorf("metrics of %s: no %s; the server predates peer counters", addr, metricPeerMessages)
	}
	return c, nil
}

// parseCounts sums the counters of one node from the Prometheus text
// format, and reports whether the peer message counter was there.
func parseCounts(sc *bufio.Scanner) (clusterCounts, bool, error) {
	var c clusterCounts
	seen := false
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		series, value := line[:sp], line[sp+1:]
		name, labels, _ := strings.Cut(series, "{")
		var dst *float64
		switch {
		case name == metricPeerMessages:
			dst, seen = &c.peerMessages, true
		case name == metricPeerCalls:
			dst = &c.peerCalls
		case name == metricSyncs:
			dst = &c.syncs
		case name == metricOps && containsAny(labels, servedOps):
			dst = &c.served
		default:
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return clusterCounts{}, false, fmt.Errorf("%s: %w", series, err)
		}
		*dst += v
	}
	if err := sc.Err(); err != nil {
		return clusterCounts{}, false, err
	}
	return c, seen, nil
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// observer is a system that records what its servers counted during a
// measurement: begin is called once the clients are connected, end once
// they stopped, with the result to annotate.
type observer interface {
	begin(ctx context.Context) error
	end(ctx context.Context, r *Result) error
}

// begin reads the nodes' counters, if the run has their addresses.
func (s *tyrSystem) begin(ctx context.Context) error {
	if len(s.metrics) == 0 {
		return nil
	}
	c, err := scrapeCluster(ctx, s.metrics)
	s.before = c
	return err
}

// end reads the counters again and stores the differences in r.
func (s *tyrSystem) end(ctx context.Context, r *Result) error {
	if len(s.metrics) == 0 {
		return nil
	}
	select {
	case <-time.After(metricsSettle):
	case <-ctx.Done():
		return ctx.Err()
	}
	after, err := scrapeCluster(ctx, s.metrics)
	if err != nil {
		return err
	}
	diff := func(a, b float64) (uint64, error) {
		if a < b {
			return 0, errors.New("a counter went down during the measurement: did a node restart?")
		}
		return uint64(a - b), nil
	}
	var errs [4]error
	r.MetricsNodes = len(s.metrics)
	r.PeerMessages, errs[0] = diff(after.peerMessages, s.before.peerMessages)
	r.PeerDeliverCalls, errs[1] = diff(after.peerCalls, s.before.peerCalls)
	r.ServedRequests, errs[2] = diff(after.served, s.before.served)
	r.Syncs, errs[3] = diff(after.syncs, s.before.syncs)
	return errors.Join(errs[:]...)
}
