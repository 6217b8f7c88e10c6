package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
)

// The limits workload measures what the machine itself allows, in the same
// run as the systems, so that their numbers can be read as a fraction of
// it. Each is measured at every client count, one connection or file per
// client, as the systems are:
//
//	limit-roundtrip  a 16-byte request answered by 16 bytes over loopback
//	                 TCP, by an echo server in this process: the most
//	                 request/response round trips any server could serve.
//	limit-stream     1 MiB writes over loopback TCP to a server in this
//	                 process that discards them: the most bytes any server
//	                 could receive.
//	limit-fsync      a 128-byte append then fsync, to a file of its own per
//	                 client in --dir: the most durable small writes without
//	                 group commit.
//	limit-disk       a 4 MiB write then fsync, sequential in a file of its
//	                 own per client in --dir (wrapping at 256 MiB): the
//	                 disk's sequential write rate for durable writes of the
//	                 size one stream put request carries.
const (
	// MachineSystem names the results of the limits workload.
	MachineSystem = "machine"

	limitRoundtripBytes = 16
	limitStreamBytes    = 1 << 20
	limitFsyncBytes     = 128
	limitDiskBytes      = 4 << 20
	limitDiskFileBytes  = 256 << 20
)

// LimitWorkloads are the results the limits workload writes.
var LimitWorkloads = []string{"limit-roundtrip", "limit-stream", "limit-fsync", "limit-disk"}

func runLimits(ctx context.Context, cfg *Config, emit func(Result) error) error {
	opBytes := map[string]int{"limit-roundtrip": limitRoundtripBytes, "limit-stream": limitStreamBytes,
		"limit-fsync": limitFsyncBytes, "limit-disk": limitDiskBytes}
	for _, kind := range LimitWorkloads {
		m := &machineSystem{kind: kind, dir: cfg.Dir}
		if err := m.Open(ctx); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		kc := *cfg
		kc.Workload, kc.ValueSize = kind, opBytes[kind]
		err := forEachPhase(ctx, &kc, []system{m}, emit, m.op)
		if cerr := m.Close(ctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("%s: %w", kind, cerr))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// machineSystem measures one of the limits.
type machineSystem struct {
	kind string
	dir  string
	ln   net.Listener
	wg   sync.WaitGroup
}

func (m *machineSystem) Name() string { return MachineSystem }

func (m *machineSystem) Note(string) string {
	switch m.kind {
	case "limit-roundtrip":
		return "limit-roundtrip: 16-byte request and response over loopback TCP to an in-process echo server"
	case "limit-stream":
		return "limit-stream: 1 MiB writes over loopback TCP to an in-process server discarding them"
	case "limit-disk":
		return fmt.Sprintf("limit-disk: 4 MiB sequential write and fsync, one file per client in %s", m.dir)
	default:
		return fmt.Sprintf("limit-fsync: 128-byte append and fsync, one file per client in %s", m.dir)
	}
}

func (m *machineSystem) Info() SystemInfo {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return SystemInfo{Version: strings.TrimSpace(runtime.GOOS + " " + string(kernel)),
		Settings: fmt.Sprintf("%d CPUs", runtime.NumCPU())}
}

// Open starts the in-process server of the TCP limits, on loopback only.
func (m *machineSystem) Open(context.Context) error {
	if m.fileBacked() {
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	m.ln = ln
	m.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			m.wg.Go(func() {
				defer c.Close()
				if m.kind == "limit-stream" {
					_, _ = io.Copy(io.Discard, c)
					return
				}
				buf := make([]byte, limitRoundtripBytes)
				for {
					if _, err := io.ReadFull(c, buf); err != nil {
						return
					}
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			})
		}
	})
	return nil
}

// Close stops the server once its connections are gone; the clients'
// files are removed as their connections close.
func (m *machineSystem) Close(context.Context) error {
	if m.ln == nil {
		return nil
	}
	err := m.ln.Close()
	m.wg.Wait()
	return err
}

func (m *machineSystem) Conns(ctx context.Context, n int) ([]conn, func() error, error) {
	var conns []*machineConn
	closeAll := func() error {
		var err error
		for _, c := range conns {
			err = errors.Join(err, c.close())
		}
		return err
	}
	for range n {
		c := &machineConn{}
		var err error
		if m.fileBacked() {
			c.f, err = os.CreateTemp(m.dir, "tyr-bench-"+m.kind+"-*")
		} else {
			var d net.Dialer
			c.nc, err = d.DialContext(ctx, "tcp", m.ln.Addr().String())
		}
		if err != nil {
			return nil, nil, errors.Join(err, closeAll())
		}
		conns = append(conns, c)
	}
	out := make([]conn, n)
	for i, c := range conns {
		out[i] = c
	}
	return out, closeAll, nil
}

// op is one round trip, one streamed write or one durable append.
func (m *machineSystem) op(ctx context.Context, c conn, _ int, _ *rand.Rand, value []byte) (int, error) {
	mc := c.(*machineConn)
	if mc.nc != nil {
		if dl, ok := ctx.Deadline(); ok {
			_ = mc.nc.SetDeadline(dl)
		}
	}
	switch m.kind {
	case "limit-roundtrip":
		if _, err := mc.nc.Write(value); err != nil {
			return 0, err
		}
		_, err := io.ReadFull(mc.nc, value)
		return len(value), err
	case "limit-stream":
		n, err := mc.nc.Write(value)
		return n, err
	case "limit-disk":
		if _, err := mc.f.WriteAt(value, mc.off); err != nil {
			return 0, err
		}
		mc.off = (mc.off + int64(len(value))) % limitDiskFileBytes
		return len(value), mc.f.Sync()
	default:
		if _, err := mc.f.Write(value); err != nil {
			return 0, err
		}
		return len(value), mc.f.Sync()
	}
}

// fileBacked reports whether the limit writes files rather than talking
// to a server.
func (m *machineSystem) fileBacked() bool { return m.kind == "limit-fsync" || m.kind == "limit-disk" }

// machineConn is a client's connection or file.
type machineConn struct {
	nc  net.Conn
	f   *os.File
	off int64 // limit-disk: where the next write goes
}

func (c *machineConn) Ping(context.Context) error { return nil }

func (c *machineConn) close() error {
	if c.nc != nil {
		return c.nc.Close()
	}
	return errors.Join(c.f.Close(), os.Remove(c.f.Name()))
}
