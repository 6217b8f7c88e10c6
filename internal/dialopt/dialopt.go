// Package dialopt holds the gRPC options every connection tyr opens uses,
// clients' and nodes' alike: the transport's message limit and how soon a
// connection to a node that went away is tried again.
package dialopt

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tyrstore/tyr/internal/limits"
)

// connectTimeoutMin is the least time one connection attempt gets.
const connectTimeoutMin = 20 * time.Second

// Options returns the options: plain TCP, messages up to
// limits.MessageBytesMax each way, and gRPC's default backoff with its
// longest wait cut to limits.ReconnectDelayMax (otherwise two minutes), so
// a restarted node is reached again promptly.
func Options() []grpc.DialOption {
	bo := backoff.DefaultConfig
	bo.MaxDelay = limits.ReconnectDelayMax
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limits.MessageBytesMax),
			grpc.MaxCallSendMsgSize(limits.MessageBytesMax)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: connectTimeoutMin}),
	}
}
