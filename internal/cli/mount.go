package cli

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/internal/fusefs"
	"github.com/tyrstore/tyr/tyrfs"
)

func init() {
	commandAdders = append(commandAdders, func(root *cobra.Command, e *env) { root.AddCommand(newMountCommand(e)) })
}

// unmountTries bounds how often tyr mount tries to unmount at a signal
// while files are still open (EBUSY), a second apart.
const unmountTries = 10

// drainTimeout bounds the commits of what tyr mount holds when it stops.
const drainTimeout = time.Minute

// mountCacheDefault is --cache's default: close-to-open, as NFS clients
// give by default (with attributes cached for 3 s and more), at a
// fraction of the round trips of a mount that caches nothing.
const mountCacheDefault = time.Second

func newMountCommand(e *env) *cobra.Command {
	var (
		create      bool
		replication uint32
		cache       time.Duration
		dirCache    time.Duration
		hold        time.Duration
		debug       bool
		allowOther  bool
		readOnly    bool
		noFailover  bool
		localLocks  bool
		lockLease   time.Duration
		background  bool
		logFile     string
		readyFD     int
	)
	cmd := &cobra.Command{
		Use:   "mount KEYSPACE MOUNTPOINT",
		Short: "Mount a keyspace as a TýrFS file system (FUSE), in the foreground or the background",
		Long: `Mount the TýrFS file system of KEYSPACE at MOUNTPOINT with FUSE, and serve
it in the foreground until SIGINT or SIGTERM (which commit what it holds,
then unmount it) or until it is unmounted (fusermount3 -u MOUNTPOINT, or
umount MOUNTPOINT as root). --background returns once it is mounted and
serves it from a process of its own session, whose messages go to --log.
The keyspace must exist, or be created with --create; its root directory
is made on the first mount.

By default the kernel caches names, attributes and pages for a second
(--cache 1s), and each open asks the cluster whether the file changed, so
an open sees everything closed before it through any mount (close-to-open);
a file created without O_EXCL is committed, with what was written to it,
at its first close or fsync, and writes are held until the close or fsync
(at most --hold-writes, 1 MiB per file), then committed together.
--cache 0 caches nothing: every stat, lookup and read asks the cluster,
and every write is committed when it returns.

Advisory locks (flock, fcntl) hold across mounts: the mount keeps them in
the cluster under a lease (--lock-lease), renewed while it runs, so the
locks of a mount killed or cut off go once their lease ends.
--local-locks leaves them to the kernel, between this mount's processes.
See the README's TýrFS section for the layout, the guarantees and the
limits.

--endpoint may list several nodes, comma-separated: the mount talks to the
first it reaches. When that node dies, the mount moves to the next listed
one, then to any other member of the cluster's ring (--no-failover keeps it
on the one node). A commit is never sent twice: one whose answer was lost
with the node is resolved with the cluster first.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ks, dir := args[0], args[1]
			if hold <= 0 {
				return fmt.Errorf("--hold-writes %v: must be above 0", hold)
			}
			if err := fusefs.CheckLockLease(lockLease); err != nil {
				return fmt.Errorf("--lock-lease: %w", err)
			}
			if logFile != "" && !background && readyFD == 0 {
				return errors.New("--log: only with --background")
			}
			if background {
				return mountInBackground(cmd, e, ks, dir)
			}
			c, err := dialMount(e.endpoint, !noFailover)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if create {
				cfg := client.DefaultKeyspaceConfig()
				cfg.Replication = replication
				if _, err := c.CreateKeyspace(ctx, ks, cfg); err != nil && !errors.Is(err, client.ErrExists) {
					return err
				}
			}
			f, err := tyrfs.New(ctx, c, ks)
			if err != nil {
				return err
			}
			srv, err := fusefs.Mount(dir, f, "tyr:"+ks, fusefs.Options{CacheTimeout: cache, DirCacheTimeout: dirCache, HoldFor: hold, Debug: debug, AllowOther: allowOther,
				LocalLocks: localLocks, LockLease: lockLease, ReadOnly: readOnly})
			if err != nil {
				return fmt.Errorf("mount %s at %s: %w", ks, dir, err)
			}
			if readyFD > 0 {
				if err := detachMount(readyFD, logFile); err != nil {
					_ = srv.Unmount()
					return err
				}
			} else {
				fmt.Fprintf(e.stdout, "mounted %s at %s; stop with Ctrl-C or fusermount3 -u %s\n", ks, dir, dir)
			}
			served := make(chan struct{})
			go func() {
				srv.Wait()
				close(served)
			}()
			// The mount's last work, each within drainTimeout once the
			// command's context ended.
			finish := func(what string, do func(context.Context) error) func() error {
				return func() error {
					fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainTimeout)
					defer cancel()
					if err := do(fctx); err != nil {
						return fmt.Errorf(what+": %w", dir, err)
					}
					return nil
				}
			}
			// What the mount holds is committed before it stops, and it
			// holds nothing more while the unmount waits for open files.
			drain := finish("commit what %s held", srv.Drain)
			// Once the mount stops, no descriptor uses the files
			// unlinked while open any more: their hidden files go.
			removeUnlinked := finish("remove the files unlinked while open through %s", srv.RemoveUnlinked)
			// And its locks go, rather than wait for their leases.
			releaseLocks := finish("give up the locks held through %s", srv.ReleaseLocks)
			select {
			case <-served:
				return errors.Join(drain(), removeUnlinked(), releaseLocks())
			case <-ctx.Done():
			}
			drained := drain()
			for i := 1; ; i++ {
				err := srv.Unmount()
				if err == nil {
					break
				}
				if i == unmountTries {
					return errors.Join(drained, removeUnlinked(), releaseLocks(),
						fmt.Errorf("unmount %s: %w (files still open? fusermount3 -u -z %s detaches it)", dir, err, dir))
				}
				fmt.Fprintf(e.stderr, "tyr: unmount %s: %v; trying again\n", dir, err)
				time.Sleep(time.Second)
			}
			<-served
			return errors.Join(drained, removeUnlinked(), releaseLocks())
		},
	}
	cmd.Flags().BoolVar(&create, "create", false, "create the keyspace if it does not exist")
	cmd.Flags().Uint32Var(&replication, "replication", 0, "replication of the keyspace --create makes (0: the server's default)")
	cmd.Flags().DurationVar(&cache, "cache", mountCacheDefault,
		"how long the kernel may cache names, attributes and pages: a stat or path walk may show what another mount changed as it was for that long, "+
			"but each open asks the cluster whether the file changed (close-to-open) and reads an unchanged file from the kernel's pages, "+
			"a file created without O_EXCL is committed at its first close, and writes are held until the close; 0: every lookup, stat and read asks the cluster, "+
			"so changes through other mounts show at the next system call, and every create and write is committed before it returns")
	cmd.Flags().DurationVar(&dirCache, "dir-cache", 0,
		"how long the kernel may cache directories' names and attributes, if longer than --cache: path walks and stats of directories "+
			"skip the cluster, but a directory removed, renamed or changed through another mount may show here as it was for that long; "+
			"files' names, attributes and data still follow --cache (close-to-open), and listings are never cached")
	cmd.Flags().DurationVar(&hold, "hold-writes", time.Second,
		"with --cache, the longest a write is held before its commit, if no close or fsync commits it first "+
			"(a write through a shared memory map may come with no close)")
	cmd.Flags().BoolVar(&debug, "debug", false, "log every FUSE request")
	cmd.Flags().BoolVar(&noFailover, "no-failover", false,
		"talk only to the first node of --endpoint, failing calls while it is down, instead of moving to another node")
	cmd.Flags().BoolVar(&localLocks, "local-locks", false,
		"leave advisory locks (flock, fcntl) to the kernel, holding between the processes of this mount only, instead of across mounts; "+
			"the close of a descriptor with nothing to commit then costs no request")
	cmd.Flags().DurationVar(&lockLease, "lock-lease", fusefs.LockLeaseDefault,
		"how long a lock held through this mount lasts without a renewal (made every third of it): "+
			"the longest other mounts wait for the locks of a mount killed or cut off from the cluster")
	cmd.Flags().BoolVar(&allowOther, "allow-other", false,
		"let other users use the mount, with the kernel checking modes and owners (root, or user_allow_other in /etc/fuse.conf)")
	cmd.Flags().BoolVar(&readOnly, "read-only", false,
		"mount read-only: every change through the mount fails with EROFS; reads, listings and advisory locks work, "+
			"and changes made through other mounts show as on any mount")
	cmd.Flags().BoolVar(&background, "background", false,
		"return once mounted, serving the mount from a process of its own session (stop it with fusermount3 -u, or umount as root)")
	cmd.Flags().StringVar(&logFile, "log", "", "with --background, the file the mount's messages are appended to once it is mounted (default: none)")
	// The write end of a pipe on which a mount started by --background
	// says it is mounted (mountInBackground).
	cmd.Flags().IntVar(&readyFD, "ready-fd", 0, "")
	_ = cmd.Flags().MarkHidden("ready-fd")
	return cmd
}

// dialMount dials the first of the comma-separated endpoints; with
// failover, the client moves to the others, then to the ring's members,
// when the node it talks to cannot be reached (client.WithFailover).
func dialMount(endpoints string, failover bool) (*client.Client, error) {
	var addrs []string
	for _, a := range strings.Split(endpoints, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no endpoint in --endpoint %q", endpoints)
	}
	if !failover {
		if len(addrs) > 1 {
			return nil, fmt.Errorf("--no-failover takes one endpoint, not %d", len(addrs))
		}
		return client.Dial(addrs[0])
	}
	return client.Dial(addrs[0], client.WithEndpoints(addrs[1:]...), client.WithFailover())
}
