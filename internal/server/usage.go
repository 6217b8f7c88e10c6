package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/balance"
	"github.com/tyrstore/tyr/internal/ring"
	"github.com/tyrstore/tyr/internal/storage"
)

// The window of the operation rate NodeUsage reports.
const (
	// opsRateBuckets is the number of whole seconds the rate is averaged
	// over: a minute, long enough to smooth bursts, short enough to follow
	// a shift of load within the time a rebalance takes to be decided.
	opsRateBuckets = 60
	// OpsRateWindow is that span as a duration.
	OpsRateWindow = opsRateBuckets * time.Second
)

// opsCounted are the calls that count as client operations in the rate:
// the data path. Keyspace administration, cluster introspection (this
// call included) and Resolve do not count, nor do peer calls.
var opsCounted = map[string]bool{
	tyrpb.Tyr_Commit_FullMethodName:  true,
	tyrpb.Tyr_Read_FullMethodName:    true,
	tyrpb.Tyr_Stat_FullMethodName:    true,
	tyrpb.Tyr_List_FullMethodName:    true,
	tyrpb.Tyr_FsFetch_FullMethodName: true,
}

// opsRate counts operations in buckets of one wall-clock second and
// reports their rate over the last opsRateBuckets whole seconds. Its
// memory is fixed: one count and one second per bucket, for the window
// and the second in progress. The time is passed
// in, so that tests drive it. It is safe for concurrent use.
type opsRate struct {
	mu struct {
		sync.Mutex
		// start is when counting began: the rate covers no time before.
		start time.Time
		// counts[i] is the number of operations in the Unix second
		// seconds[i]; bucket i holds a second s with s mod
		// (opsRateBuckets+1) == i, and is reset when a later second
		// reuses it.
		counts  [opsRateBuckets + 1]uint64
		seconds [opsRateBuckets + 1]int64
	}
}

// newOpsRate returns a rate that starts counting at start.
func newOpsRate(start time.Time) *opsRate {
	r := &opsRate{}
	r.mu.start = start
	for i := range r.mu.seconds {
		r.mu.seconds[i] = -1 // no second yet: 0 is a valid Unix second
	}
	return r
}

// bucket returns the bucket of Unix second sec.
func bucket(sec int64) int {
	const n = opsRateBuckets + 1
	i := int(sec % n)
	if i < 0 {
		i += n // a time before 1970
	}
	return i
}

// add counts one operation at now.
func (r *opsRate) add(now time.Time) {
	sec := now.Unix()
	i := bucket(sec)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.mu.seconds[i] == sec:
	case r.mu.seconds[i] < sec:
		r.mu.seconds[i], r.mu.counts[i] = sec, 0
	default:
		return // the clock stepped back past this bucket's second: drop it
	}
	r.mu.counts[i]++
}

// rate returns the operations per second over the whole seconds before
// now's, at most opsRateBuckets of them and none before start, and the
// span it averaged over. Operations in now's second count from the next
// second on. With no whole second since start, it returns 0 and 0.
func (r *opsRate) rate(now time.Time) (perSecond float64, span time.Duration) {
	sec := now.Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	from := time.Unix(sec-opsRateBuckets, 0)
	if r.mu.start.After(from) {
		from = r.mu.start
	}
	span = time.Unix(sec, 0).Sub(from)
	if span <= 0 {
		return 0, 0
	}
	var n uint64
	for i, s := range r.mu.seconds {
		if s >= sec-opsRateBuckets && s < sec {
			n += r.mu.counts[i]
		}
	}
	return float64(n) / span.Seconds(), span
}

// countOps returns the interceptor that counts the calls of opsCounted
// into s's rate once they are answered, failed ones included: a refused
// call cost the node work too.
func (s *Service) countOps() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if opsCounted[info.FullMethod] {
			s.ops.add(time.Now())
		}
		return resp, err
	}
}

// WithCapacity sets the capacity NodeUsage reports, in bytes; 0, the
// default, measures the file system holding the data directory at each
// call. Call it before Register.
func (s *Service) WithCapacity(capacityBytes uint64) *Service {
	s.capacityBytes = capacityBytes
	return s
}

// NodeUsage implements tyrpb.TyrServer: this node's capacity, the bytes
// its keyspaces occupy and the rate of client operations it answered. It
// answers UNAVAILABLE if the file system cannot be measured or the
// storage is closed.
func (s *Service) NodeUsage(context.Context, *tyrpb.NodeUsageRequest) (*tyrpb.NodeUsageResponse, error) {
	resp := &tyrpb.NodeUsageResponse{CapacityBytes: s.capacityBytes, CapacityConfigured: s.capacityBytes != 0}
	if s.cluster != nil {
		resp.NodeId = string(s.cluster.Self())
	}
	if !resp.CapacityConfigured {
		n, err := s.engine.FileSystemBytes()
		if err != nil {
			return nil, toStatus(err)
		}
		resp.CapacityBytes = n
	}
	stored, err := s.engine.DiskBytes()
	if err != nil {
		return nil, toStatus(err)
	}
	resp.StoredBytes = stored
	s.engine.Each(func(ks *storage.Keyspace) {
		if u, err := s.keyspaceUsage(ks); err == nil { // else no placement yet: not counted
			resp.LogicalBytes += u.LogicalBytes
			resp.ReclaimBytes += u.ReclaimBytes
		}
	})
	if resp.FreeBytes, err = s.engine.FreeBytes(); err != nil {
		return nil, toStatus(err)
	}
	resp.MinFreeBytes = s.engine.MinFreeBytes()
	rate, span := s.ops.rate(time.Now())
	resp.OpsPerSecond, resp.OpsWindowSeconds = rate, span.Seconds()
	return resp, nil
}

// MemberUsage returns the usage member id reports (NodeUsage), asking it
// through the node's connection to it, or this service for this node. It
// is the node.Config.Usage of a server.
func (s *Service) MemberUsage(ctx context.Context, id ring.NodeID) (balance.NodeReport, error) {
	var resp *tyrpb.NodeUsageResponse
	var err error
	if s.cluster == nil || id == s.cluster.Self() {
		resp, err = s.NodeUsage(ctx, &tyrpb.NodeUsageRequest{})
	} else {
		if s.node == nil {
			return balance.NodeReport{}, errors.New("server: no node to reach other members through")
		}
		conn, cerr := s.node.Conn(id)
		if cerr != nil {
			return balance.NodeReport{}, cerr
		}
		resp, err = tyrpb.NewTyrClient(conn).NodeUsage(ctx, &tyrpb.NodeUsageRequest{})
	}
	if err != nil {
		return balance.NodeReport{}, err
	}
	return balance.NodeReport{ID: id, CapacityBytes: resp.GetCapacityBytes(), StoredBytes: resp.GetStoredBytes(),
		OpsPerSecond: resp.GetOpsPerSecond()}, nil
}
