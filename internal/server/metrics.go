package server

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/tyrstore/tyr/api/tyrpb"
)

// Metrics are a node's Prometheus metrics, on a registry of their own.
type Metrics struct {
	Registry *prometheus.Registry
	ops      *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	bytes    *prometheus.CounterVec
	reads    *prometheus.CounterVec
	readsBy  map[string]prometheus.Counter // reads by path, resolved once
	// dataReads counts the reads answered over the data path.
	dataReads prometheus.Counter
	// dataCommits counts the commits answered over the data path.
	dataCommits prometheus.Counter
	// fsPerms counts TýrFS fetches' permission lookups by source;
	// fsInvalidated counts the copies of permissions invalidations dropped.
	fsPerms       *prometheus.CounterVec
	fsPermBy      map[string]prometheus.Counter // fsPerms by source, resolved once
	fsInvalidated prometheus.Counter
}

// NewMetrics creates the metrics: tyr_ops_total{op,code},
// tyr_op_duration_seconds{op}, tyr_bytes_total{direction},
// tyr_reads_total{path}, tyr_data_path_reads_total,
// tyr_fs_permission_lookups_total{source},
// tyr_fs_permission_copies_dropped_total and the Go runtime and process
// collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tyr_ops_total", Help: "Requests served, by operation and result code.",
		}, []string{"op", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tyr_op_duration_seconds", Help: "Request latency, by operation.",
			Buckets: prometheus.ExponentialBuckets(20e-6, 2, 18),
		}, []string{"op"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tyr_bytes_total", Help: "Blob payload bytes, by direction (written, read).",
		}, []string{"direction"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tyr_reads_total",
			Help: "Reads and stats of blobs, by path: local (served by this node's store) or forwarded_out (sent to the node that serves them).",
		}, []string{"path"}),
		dataReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tyr_data_path_reads_total",
			Help: "Reads answered over the data path; the other reads of tyr_ops_total came over gRPC.",
		}),
		dataCommits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tyr_data_path_commits_total",
			Help: "Commits answered over the data path; the other commits of tyr_ops_total came over gRPC.",
		}),
		fsPerms: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tyr_fs_permission_lookups_total",
			Help: "Directory permissions TýrFS fetches checked, by source: copy (a popular directory's copy), local (a read of this node's store, which holds the directory) or remote (a read of its header from another node).",
		}, []string{"source"}),
		fsInvalidated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tyr_fs_permission_copies_dropped_total",
			Help: "Copies of directories' permissions dropped by invalidations.",
		}),
	}
	m.fsPermBy = map[string]prometheus.Counter{}
	for _, src := range []string{fsPermLocal, fsPermCopy, fsPermRemote} {
		m.fsPermBy[src] = m.fsPerms.WithLabelValues(src)
	}
	// Both paths are exported from the start, at zero.
	m.readsBy = map[string]prometheus.Counter{}
	for _, path := range []string{readLocal, readForwarded} {
		m.readsBy[path] = m.reads.WithLabelValues(path)
	}
	m.Registry.MustRegister(m.ops, m.latency, m.bytes, m.reads, m.dataReads, m.dataCommits, m.fsPerms, m.fsInvalidated,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// The paths of tyr_reads_total.
const (
	readLocal     = "local"
	readForwarded = "forwarded_out"
)

// countRead counts one read or stat on path; m may be nil (a Service that
// was not registered).
func (m *Metrics) countRead(path string) {
	if m != nil {
		m.readsBy[path].Inc()
	}
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

func (m *Metrics) interceptor(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		op := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
		start := time.Now()
		resp, err := handler(ctx, req)
		elapsed := time.Since(start)
		code := status.Code(err)
		m.ops.WithLabelValues(op, code.String()).Inc()
		m.latency.WithLabelValues(op).Observe(elapsed.Seconds())
		switch r := req.(type) {
		case *tyrpb.CommitRequest:
			if err == nil {
				n := 0
				for _, o := range r.GetOps() {
					n += len(o.GetWrite().GetData()) + len(o.GetAppend().GetData())
				}
				m.bytes.WithLabelValues("written").Add(float64(n))
			}
		case *tyrpb.ReadRequest:
			if out, ok := resp.(*tyrpb.ReadResponse); ok && err == nil {
				m.bytes.WithLabelValues("read").Add(float64(len(out.GetData())))
			}
		}
		if err != nil {
			log.Debug("request failed", "op", op, "code", code.String(), "err", status.Convert(err).Message(),
				"elapsed", elapsed)
		}
		return resp, err
	}
}
