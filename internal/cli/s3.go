package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spf13/cobra"
	"github.com/versity/versitygw/embedgw"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/s3gw"
)

func init() {
	commandAdders = append(commandAdders, func(root *cobra.Command, e *env) { root.AddCommand(newS3Command(e)) })
}

// s3Flags configure an S3 gateway: tyr s3, and tyr server --s3-listen.
type s3Flags struct {
	listen      string
	accessKey   string
	secretKey   string
	region      string
	replication uint32
	sync        bool
	maxPut      string
}

// addS3Flags adds the gateway's flags; listenFlag names its address flag.
func addS3Flags(cmd *cobra.Command, f *s3Flags, listenFlag, listenDefault, listenHelp string) {
	cmd.Flags().StringVar(&f.listen, listenFlag, listenDefault, listenHelp)
	cmd.Flags().StringVar(&f.accessKey, "s3-access-key", os.Getenv("TYR_S3_ACCESS_KEY"),
		"the S3 access key ID clients sign with (env TYR_S3_ACCESS_KEY)")
	cmd.Flags().StringVar(&f.secretKey, "s3-secret-key", os.Getenv("TYR_S3_SECRET_KEY"),
		"the S3 secret access key (env TYR_S3_SECRET_KEY)")
	cmd.Flags().StringVar(&f.region, "s3-region", "us-east-1", "the region the gateway reports and signatures name")
	cmd.Flags().Uint32Var(&f.replication, "s3-replication", 0,
		"replication of the keyspaces CreateBucket makes (0: the server's default)")
	cmd.Flags().BoolVar(&f.sync, "s3-sync", true,
		"whether the keyspaces CreateBucket makes sync each commit to disk before acknowledging it")
	cmd.Flags().StringVar(&f.maxPut, "s3-max-put", "5GiB", "the largest object one PUT stores, and the largest part of a multipart upload")
}

func newS3Command(e *env) *cobra.Command {
	var (
		f             s3Flags
		metricsListen string
	)
	cmd := &cobra.Command{
		Use:   "s3",
		Short: "Serve the S3 API of a tyr server or cluster (--endpoint)",
		Long: `Serve the S3 API: buckets are keyspaces, objects are blobs of the same
keys, so the native API reads what S3 clients write. Requests are signed
with --s3-access-key and --s3-secret-key (SigV4); an unsigned or badly
signed request gets 403 and changes nothing. See the README's S3 section
for what is supported.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client.Dial(e.endpoint)
			if err != nil {
				return err
			}
			defer c.Close()
			// An interface, so that no registry is nil, not a nil
			// *Registry inside a non-nil Registerer.
			var reg prometheus.Registerer
			if metricsListen != "" {
				r := prometheus.NewRegistry()
				reg = r
				lis, err := net.Listen("tcp", metricsListen)
				if err != nil {
					return fmt.Errorf("listen on %s: %w", metricsListen, err)
				}
				mux := http.NewServeMux()
				mux.Handle("/metrics", promhttp.HandlerFor(r, promhttp.HandlerOpts{}))
				srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
				go func() { _ = srv.Serve(lis) }()
				defer srv.Close()
			}
			return runS3(cmd.Context(), c, f, reg, slog.Default())
		},
	}
	addS3Flags(cmd, &f, "listen", "127.0.0.1:7480", "address of the S3 API")
	cmd.Flags().StringVar(&metricsListen, "metrics-listen", "", "address for the gateway's Prometheus metrics at /metrics (off if empty)")
	return cmd
}

// runS3 serves the S3 API over c until ctx ends, with its metrics in reg
// if not nil.
func runS3(ctx context.Context, c *client.Client, f s3Flags, reg prometheus.Registerer, log *slog.Logger) error {
	if f.accessKey == "" || f.secretKey == "" {
		return fmt.Errorf("the S3 gateway needs credentials: set --s3-access-key and --s3-secret-key (or TYR_S3_ACCESS_KEY and TYR_S3_SECRET_KEY)")
	}
	cfg := client.DefaultKeyspaceConfig()
	cfg.Replication, cfg.Sync = f.replication, f.sync
	log.Info("serving S3", "addr", f.listen, "access_key", f.accessKey)
	maxPut, err := parseSize("--s3-max-put", f.maxPut)
	if err != nil {
		return err
	}
	if maxPut < s3gw.PartBytesMin || maxPut > s3gw.PutBytesMaxDefault {
		return fmt.Errorf("--s3-max-put %s: must be %d to %d bytes", f.maxPut, s3gw.PartBytesMin, s3gw.PutBytesMaxDefault)
	}
	be := s3gw.New(c, cfg)
	be.PutBytesMax = int64(maxPut)
	if reg != nil {
		be.Metrics = s3gw.NewMetrics(reg)
	}
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	go be.SweepLoop(sweepCtx)
	return embedgw.RunVersityGW(ctx, be, &embedgw.Config{
		RootUserAccess:    f.accessKey,
		RootUserSecret:    f.secretKey,
		IAMService:        s3gw.IAM(f.accessKey, f.secretKey),
		Region:            f.region,
		Ports:             []string{f.listen},
		MaxConnections:    1024,
		MaxRequests:       256,
		MultipartMaxParts: 10000,
		Quiet:             true,
		KeepAlive:         true,
	})
}
