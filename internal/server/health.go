package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tyrstore/tyr/api/tyrpb"
	"github.com/tyrstore/tyr/internal/errs"
)

// Readiness: a server is ready once it serves reads (node.Node.Ready: caught
// up since it started, read lease held, ring known). It says so in three
// places, all from Ready:
//
//   - the ready file (tyr server --ready-file), written once, the first
//     time it is ready;
//   - the standard gRPC health service (grpc.health.v1.Health) on the
//     client API port: SERVING while ready, NOT_SERVING otherwise, for the
//     service "" (the server) and tyr.v1.Tyr;
//   - GET /healthz on the metrics listener (--metrics-listen), if any: 200
//     "serving" while ready, 503 with the reason otherwise.
//
// A server without a node (no replication; tests) is ready once it serves.

// healthWatchInterval is how often a Watch of the health service checks
// for a change.
const healthWatchInterval = 100 * time.Millisecond

// Ready returns nil once the server serves reads, else an
// errs.ErrUnavailable error that says why (see above).
func (s *Service) Ready() error {
	if s.node == nil {
		return nil
	}
	return s.node.Ready()
}

// healthServer is the gRPC health service over Ready.
type healthServer struct {
	healthpb.UnimplementedHealthServer
	ready func() error
}

// healthServices are the services the health service reports on: the
// server as a whole ("") and the client API.
var healthServices = []string{"", tyrpb.Tyr_ServiceDesc.ServiceName}

func (h healthServer) status(service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	for _, s := range healthServices {
		if s == service {
			if h.ready() != nil {
				return healthpb.HealthCheckResponse_NOT_SERVING, nil
			}
			return healthpb.HealthCheckResponse_SERVING, nil
		}
	}
	return healthpb.HealthCheckResponse_SERVICE_UNKNOWN, status.Errorf(codes.NotFound, "%v: unknown service %q", errs.ErrNotFound, service)
}

// Check implements healthpb.HealthServer.
func (h healthServer) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	st, err := h.status(req.GetService())
	if err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// List implements healthpb.HealthServer.
func (h healthServer) List(context.Context, *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	out := &healthpb.HealthListResponse{Statuses: map[string]*healthpb.HealthCheckResponse{}}
	for _, s := range healthServices {
		st, _ := h.status(s)
		out.Statuses[s] = &healthpb.HealthCheckResponse{Status: st}
	}
	return out, nil
}

// Watch implements healthpb.HealthServer: it sends the status at once and
// then on every change, until the caller ends the call. An unknown service
// is SERVICE_UNKNOWN, as the health protocol asks.
func (h healthServer) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	var last healthpb.HealthCheckResponse_ServingStatus = -1
	ticker := time.NewTicker(healthWatchInterval)
	defer ticker.Stop()
	for {
		st, _ := h.status(req.GetService())
		if st != last {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-ticker.C:
		}
	}
}

// HealthHandler serves GET /healthz: 200 "serving" while ready, else 503
// "not serving: <why>".
func HealthHandler(ready func() error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not serving: %s\n", errs.Text(err))
			return
		}
		fmt.Fprintln(w, "serving")
	})
}
