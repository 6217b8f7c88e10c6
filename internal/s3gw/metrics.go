package s3gw

import (
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/versity/versitygw/s3err"
)

// Metrics are the gateway's Prometheus metrics, per bucket and operation:
// tyr_s3_requests_total{bucket,op,code} (code is the S3 error code, or OK),
// tyr_s3_request_duration_seconds{op}, and
// tyr_s3_bytes_total{bucket,direction} (object bytes in and out). The
// bucket label is empty for calls without one (ListBuckets). Requests the
// protocol layer answers itself (bad signatures, malformed requests) never
// reach the back-end and are not counted; nor are the checks it makes of a
// bucket's ACL, policy, CORS, versioning and object lock while serving
// other requests (GetBucketAcl and the like are not counted at all).
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	bytes    *prometheus.CounterVec
}

// NewMetrics creates the gateway's metrics in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tyr_s3_requests_total", Help: "S3 requests served, by bucket, operation and S3 error code (OK).",
		}, []string{"bucket", "op", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tyr_s3_request_duration_seconds", Help: "S3 request latency in the back-end, by operation.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 18),
		}, []string{"op"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tyr_s3_bytes_total", Help: "Object bytes, by bucket and direction (in: PUT and parts, out: GET).",
		}, []string{"bucket", "direction"}),
	}
	reg.MustRegister(m.requests, m.latency, m.bytes)
	return m
}

// done counts a request of op on bucket that started at start and ended
// with *err. m may be nil.
func (m *Metrics) done(op, bucket string, start time.Time, err *error) {
	if m == nil {
		return
	}
	code := "OK"
	if *err != nil {
		code = "InternalError"
		var apiErr s3err.APIError
		var argErr s3err.InvalidArgumentError
		switch {
		case errors.As(*err, &apiErr):
			code = apiErr.Code
		case errors.As(*err, &argErr):
			code = "InvalidArgument"
		}
	}
	// The protocol layer's strings may share its request buffers, which
	// it reuses: the labels kept must be copies.
	m.requests.WithLabelValues(strings.Clone(bucket), op, code).Inc()
	m.latency.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

// moved counts n object bytes of bucket in direction "in" or "out".
func (m *Metrics) moved(bucket, direction string, n int64) {
	if m != nil && n > 0 {
		m.bytes.WithLabelValues(strings.Clone(bucket), direction).Add(float64(n))
	}
}
