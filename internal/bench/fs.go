package bench

// The fs workload: the seeds' file system experiment scaled to one
// machine. One data set is stored as large files (--large-file, 32 MiB)
// and again as small files (--small-file, 32 KiB) of the same total size
// (--data-set), then read whole by each count of readers (--clients) for
// --duration; then, for empty files and for 4 KiB files, each client
// creates files in a directory of its own for --duration, stats them at
// random, reads them (4 KiB only) and deletes them all; last, each client
// updates a file of its own in place, 4 KiB at a random place at a time,
// each update durable before the next (fdatasync; a synced commit). Each
// operation is one file: rates are files (or updates) per second, and
// bytes read or written.
//
// Systems are file systems under the same operations:
//   - directories, any mounted path driven with plain os calls: the local
//     disk (the physical reference), a TýrFS FUSE mount, a CephFS mount;
//   - tyrfs-native, the tyrfs package over the Go client: Fetch reads a
//     whole file, WriteFile writes one (one transaction).
//
// Every file holds a pattern made from its path, and every read checks all
// of its bytes: a wrong read fails the run.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tyrstore/tyr/client"
	"github.com/tyrstore/tyr/tyrfs"
)

// FSWorkload is the file system workload's name.
const FSWorkload = "fs"

// The roles of the fs workload's systems, carried in Result.Role: the
// TýrFS systems under test and the peers they are compared with.
const (
	RoleFSNative      = "tyrfs-native"
	RoleFSMount       = "tyrfs-mount"
	RoleFSPeer        = "peer"
	RoleFSDistributed = "distributed-peer"
)

// FS workload defaults and bounds.
const (
	FSDataSetDefault   = 256 << 20
	FSLargeFileDefault = 32 << 20
	FSSmallFileDefault = 32 << 10
	// FSMetaFileBytes is the size of the non-empty files of the metadata
	// phases.
	FSMetaFileBytes = 4 << 10
	// FSMetaFilesDefault bounds the files created in one create phase, so
	// that a fast system does not spend the run deleting.
	FSMetaFilesDefault = 20_000
	// FSUpdateBytes is what one update of the update phase writes, at a
	// multiple of it inside a file of FSUpdateFileBytes of the client's.
	FSUpdateBytes     = 4 << 10
	FSUpdateFileBytes = 4 << 20
	fsFileBytesMax    = 1 << 30
	fsDataSetMax      = 64 << 30
	fsFilesMax        = 1 << 20
	// fsBlock is the unit of the content pattern: each block starts with a
	// stamp of its file and index.
	fsBlock = 4 << 10
	// fsFillWorkers is how many files a fill writes at once.
	fsFillWorkers = 4
)

// FSDir is a directory system: NAME=PATH on the command line.
type FSDir struct {
	Name string
	Path string
	Role string // RoleFSMount, RoleFSPeer or RoleFSDistributed
}

// ParseFSDir parses NAME=PATH, PATH an absolute directory.
func ParseFSDir(s, role string) (FSDir, error) {
	name, p, ok := strings.Cut(s, "=")
	if !ok || name == "" || !filepath.IsAbs(p) {
		return FSDir{}, fmt.Errorf("%q: want NAME=/absolute/directory", s)
	}
	return FSDir{Name: name, Path: filepath.Clean(p), Role: role}, nil
}

// FSReadWorkload names the results of reading whole files of size bytes:
// fs-read-32MiB, fs-read-4KiB.
func FSReadWorkload(size int64) string { return "fs-read-" + sizeLabel(size) }

// FSWriteWorkload names the results of storing the data set's files of
// size bytes: fs-write-32MiB.
func FSWriteWorkload(size int64) string { return "fs-write-" + sizeLabel(size) }

// fsMetaWorkload names a metadata phase's results: fs-create-empty,
// fs-stat-4KiB.
func fsMetaWorkload(op string, size int64) string {
	if size == 0 {
		return "fs-" + op + "-empty"
	}
	return "fs-" + op + "-" + sizeLabel(size)
}

// fsTarget is one file system under the workload. Paths are relative to
// the run's own directory, which Open makes and Close removes with all it
// holds.
type fsTarget interface {
	Name() string
	Role() string
	Note() string
	Info() SystemInfo
	Open(ctx context.Context) error
	Close(ctx context.Context) error
	// Client returns the handle of one client: a connection of its own
	// where the system has connections.
	Client(ctx context.Context) (fsClient, error)
}

// reserver is an fsClient that reads into buffers of its own: Reserve
// readies them for batches of n files of size bytes before a measurement
// starts, as the others' read buffer is.
type reserver interface {
	Reserve(n int, size int64)
}

// batchReader is an fsClient that also reads many whole files in one
// call: TýrFS's FetchMany.
type batchReader interface {
	// ReadFiles reads the whole files at paths, in order.
	ReadFiles(ctx context.Context, paths []string) ([][]byte, error)
}

// fsBatchBytes is the bytes a batched read asks for at once: 256 files of
// 32 KiB (FetchManyMax), and at least one file: fewer calls for the same
// bytes, closer to the one call a 32 MiB file takes (at one reader on one
// server, 256 files a call read 32 KiB files 20-30% faster than 32).
const fsBatchBytes = 8 << 20

// BatchSystem names the measurement of a system's batched reads.
func BatchSystem(name string) string { return name + "-fetchmany" }

type fsClient interface {
	Mkdir(ctx context.Context, p string) error
	// Create makes an empty file, failing if p exists.
	Create(ctx context.Context, p string) error
	// WriteFile makes a file holding data, failing if p exists (but for
	// a directory whose creates truncate, Config.FSCreateTrunc).
	WriteFile(ctx context.Context, p string, data []byte) error
	// ReadFile reads the whole file at p into buf, which has room for
	// more than the file should hold, and returns what it read.
	ReadFile(ctx context.Context, p string, buf []byte) ([]byte, error)
	Stat(ctx context.Context, p string) (int64, error)
	Remove(ctx context.Context, p string) error
	// Update writes data at off into the existing file p, durable before
	// it returns.
	Update(ctx context.Context, p string, off int64, data []byte) error
	Close() error
}

// dirTarget is a mounted directory driven with os calls.
type dirTarget struct {
	d     FSDir
	trunc bool // creates open with O_CREAT|O_TRUNC (Config.FSCreateTrunc)
	root  string
	info  SystemInfo
}

func (t *dirTarget) Name() string     { return t.d.Name }
func (t *dirTarget) Role() string     { return t.d.Role }
func (t *dirTarget) Info() SystemInfo { return t.info }
func (t *dirTarget) Note() string {
	open := "O_CREAT|O_EXCL"
	if t.trunc {
		open = "O_CREAT|O_TRUNC"
	}
	return t.d.Name + ": a directory (" + t.info.Settings + ") driven with os calls: a read is open, read to EOF, close; " +
		"a write open(" + open + "), write, close, without fsync; an update pwrite into a file the client keeps open, then fdatasync"
}

func (t *dirTarget) Open(context.Context) error {
	st, err := os.Stat(t.d.Path)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", t.d.Path)
	}
	t.info.Settings = t.d.Path + ", " + fsType(t.d.Path)
	root, err := os.MkdirTemp(t.d.Path, "tyr-bench-fs-")
	if err != nil {
		return err
	}
	t.root = root
	return nil
}

// fsType names the file system mounted at or above p, from
// /proc/self/mounts, or "" when it cannot tell.
func fsType(p string) string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return ""
	}
	best, typ := "", ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		mp := f[1]
		if (p == mp || strings.HasPrefix(p, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, typ = mp, f[2]
		}
	}
	return typ
}

func (t *dirTarget) Close(context.Context) error {
	if t.root == "" {
		return nil
	}
	return os.RemoveAll(t.root)
}

func (t *dirTarget) Client(context.Context) (fsClient, error) {
	return dirClient{root: t.root, trunc: t.trunc, open: map[string]*os.File{}}, nil
}

type dirClient struct {
	root  string
	trunc bool
	open  map[string]*os.File // the files Update opened, by path
}

func (c dirClient) path(p string) string { return filepath.Join(c.root, filepath.FromSlash(p)) }

func (c dirClient) Mkdir(_ context.Context, p string) error { return os.Mkdir(c.path(p), 0o755) }

func (c dirClient) Create(ctx context.Context, p string) error { return c.WriteFile(ctx, p, nil) }

func (c dirClient) WriteFile(_ context.Context, p string, data []byte) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if c.trunc {
		// The bench's paths are new: the open makes the file all the
		// same.
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(c.path(p), flags, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func (c dirClient) ReadFile(_ context.Context, p string, buf []byte) ([]byte, error) {
	f, err := os.Open(c.path(p))
	if err != nil {
		return nil, err
	}
	n, err := io.ReadFull(f, buf)
	cerr := f.Close()
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:n], cerr
}

func (c dirClient) Stat(_ context.Context, p string) (int64, error) {
	st, err := os.Stat(c.path(p))
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (c dirClient) Remove(_ context.Context, p string) error { return os.Remove(c.path(p)) }

func (c dirClient) Update(_ context.Context, p string, off int64, data []byte) error {
	f, ok := c.open[p]
	if !ok {
		var err error
		if f, err = os.OpenFile(c.path(p), os.O_WRONLY, 0); err != nil {
			return err
		}
		c.open[p] = f
	}
	if _, err := f.WriteAt(data, off); err != nil {
		return err
	}
	return syscall.Fdatasync(int(f.Fd()))
}

func (c dirClient) Close() error {
	var err error
	for p, f := range c.open {
		err = errors.Join(err, f.Close())
		delete(c.open, p)
	}
	return err
}

// nativeTarget is TýrFS through the tyrfs package, in a keyspace of its
// own made as `tyr mount --create` makes one, dropped at the end.
type nativeTarget struct {
	name, endpoint string
	rf             int
	sync           bool
	admin          *client.Client
	keyspace       string
	created        bool
	info           SystemInfo
}

// nativeRoot is the run's directory in the native system's keyspace.
const nativeRoot = "/bench"

func (t *nativeTarget) Name() string     { return t.name }
func (t *nativeTarget) Role() string     { return RoleFSNative }
func (t *nativeTarget) Info() SystemInfo { return t.info }
func (t *nativeTarget) Note() string {
	return t.name + ": the tyrfs package over the Go client, a client connection per reader or writer: a read is " +
		"Fetch (the whole file, permissions checked where it lies: one request up to 4 MiB, then the rest at the version it found), a write " +
		"WriteFile (one transaction), a stat Stat (a read of the 64-byte header), a delete Unlink, an update WriteAt (one transaction)"
}

func (t *nativeTarget) Open(ctx context.Context) error {
	admin, err := client.Dial(t.endpoint)
	if err != nil {
		return err
	}
	t.admin = admin
	cfg := client.DefaultKeyspaceConfig()
	cfg.Replication = uint32(t.rf)
	cfg.Sync = t.sync
	if _, err := admin.CreateKeyspace(ctx, t.keyspace, cfg); err != nil {
		return fmt.Errorf("create keyspace %s: %w", t.keyspace, err)
	}
	t.created = true
	ki, err := admin.Keyspace(ctx, t.keyspace)
	if err != nil {
		return err
	}
	t.info.Settings = "tyr at " + t.endpoint + ", " + keyspaceSettings(ki.Config)
	fs, err := tyrfs.New(ctx, admin, t.keyspace)
	if err != nil {
		return err
	}
	_, err = fs.Mkdir(ctx, nativeRoot, fsOwner(0o755))
	return err
}

func fsOwner(mode uint32) tyrfs.Owner {
	return tyrfs.Owner{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Mode: mode}
}

func (t *nativeTarget) Close(ctx context.Context) error {
	if t.admin == nil {
		return nil
	}
	var err error
	if t.created {
		err = t.admin.DropKeyspace(ctx, t.keyspace)
	}
	return errors.Join(err, t.admin.Close())
}

func (t *nativeTarget) Client(ctx context.Context) (fsClient, error) {
	c, err := client.Dial(t.endpoint)
	if err != nil {
		return nil, err
	}
	fs, err := tyrfs.New(ctx, c, t.keyspace)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &nativeClient{c: c, fs: fs}, nil
}

// nativeClient reads into buffers of its own, reused from read to read as
// a program reading many files would (tyrfs.FetchInto): bufs[i] for the
// i-th file of a batch, made ready before a measurement (Reserve) and
// grown if a larger file comes.
type nativeClient struct {
	c    *client.Client
	fs   *tyrfs.FS
	bufs [][]byte
}

func nativePath(p string) string { return path.Join(nativeRoot, p) }

func (c *nativeClient) Mkdir(ctx context.Context, p string) error {
	_, err := c.fs.Mkdir(ctx, nativePath(p), fsOwner(0o755))
	return err
}

func (c *nativeClient) Create(ctx context.Context, p string) error {
	_, err := c.fs.Create(ctx, nativePath(p), fsOwner(0o644))
	return err
}

func (c *nativeClient) WriteFile(ctx context.Context, p string, data []byte) error {
	_, err := c.fs.WriteFile(ctx, nativePath(p), fsOwner(0o644), data)
	return err
}

func (c *nativeClient) ReadFile(ctx context.Context, p string, _ []byte) ([]byte, error) {
	c.grow(1)
	_, data, err := c.fs.FetchInto(ctx, nativePath(p), c.bufs[0])
	c.fit(0, len(data))
	return data, err
}

func (c *nativeClient) ReadFiles(ctx context.Context, paths []string) ([][]byte, error) {
	ps := make([]string, len(paths))
	for i, p := range paths {
		ps[i] = nativePath(p)
	}
	c.grow(len(ps))
	rs, err := c.fs.FetchManyInto(ctx, ps, c.bufs[:len(ps)])
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(rs))
	for i, r := range rs {
		if r.Err != nil {
			return nil, fmt.Errorf("%s: %w", ps[i], r.Err)
		}
		out[i] = r.Data
		c.fit(i, len(r.Data))
	}
	return out, nil
}

// Reserve readies buffers for batches of n files of size bytes, so that a
// measurement's first reads allocate nothing.
func (c *nativeClient) Reserve(n int, size int64) {
	c.grow(n)
	for i := range n {
		c.fit(i, int(size))
	}
}

// grow makes room for n buffers.
func (c *nativeClient) grow(n int) {
	if len(c.bufs) < n {
		c.bufs = append(c.bufs, make([][]byte, n-len(c.bufs))...)
	}
}

// fit makes buffer i large enough for a file of size bytes: after a file
// that did not fit and was read into new memory, for the next like it.
func (c *nativeClient) fit(i, size int) {
	if need := size + tyrfs.HeaderBytes; cap(c.bufs[i]) < need {
		c.bufs[i] = make([]byte, need)
	}
}

func (c *nativeClient) Stat(ctx context.Context, p string) (int64, error) {
	a, err := c.fs.Stat(ctx, nativePath(p), tyrfs.KindFile)
	return int64(a.Size), err
}

func (c *nativeClient) Remove(ctx context.Context, p string) error {
	return c.fs.Unlink(ctx, nativePath(p))
}

func (c *nativeClient) Update(ctx context.Context, p string, off int64, data []byte) error {
	return c.fs.WriteAt(ctx, nativePath(p), uint64(off), data)
}

func (c *nativeClient) Close() error { return c.c.Close() }

// fsPattern is the content of every file: block j of the file at p is a
// stamp of p's hash and j, then bytes of a random base at an offset that
// depends on both, so no two blocks of a file, or of two files, are alike
// and no system gains from compressing them.
type fsPattern struct{ base []byte }

func newFSPattern(seed uint64) fsPattern {
	base := make([]byte, 1<<20+fsBlock)
	fillRandom(rand.New(rand.NewPCG(seed, 0xf5)), base)
	return fsPattern{base: base}
}

func fsHash(p string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(p))
	return h.Sum64()
}

func (pt fsPattern) block(id uint64, j int) (uint64, []byte) {
	stamp := id ^ uint64(j)*0x9e3779b97f4a7c15
	off := int(stamp % uint64(len(pt.base)-fsBlock))
	return stamp, pt.base[off : off+fsBlock-8]
}

// fill writes the content of the file at p into b.
func (pt fsPattern) fill(p string, b []byte) {
	id := fsHash(p)
	for j := 0; len(b) > 0; j++ {
		stamp, rest := pt.block(id, j)
		var s [8]byte
		binary.LittleEndian.PutUint64(s[:], stamp)
		n := copy(b, s[:])
		b = b[n:]
		b = b[copy(b, rest):]
	}
}

// check reports whether data is the whole content of the file at p, of
// size bytes, saying where it differs if not.
func (pt fsPattern) check(p string, data []byte, size int) error {
	if len(data) != size {
		return fmt.Errorf("%s: read %d bytes, want %d", p, len(data), size)
	}
	id := fsHash(p)
	for j := 0; len(data) > 0; j++ {
		stamp, rest := pt.block(id, j)
		var s [8]byte
		binary.LittleEndian.PutUint64(s[:], stamp)
		n := min(len(data), 8)
		ok := bytes.Equal(data[:n], s[:n])
		data = data[n:]
		m := min(len(data), len(rest))
		if !ok || !bytes.Equal(data[:m], rest[:m]) {
			return fmt.Errorf("%s: wrong content in bytes %d to %d", p, j*fsBlock, (j+1)*fsBlock)
		}
		data = data[m:]
	}
	return nil
}

// fsFileSet is the n files of size bytes of one data set or phase.
type fsFileSet struct {
	size  int64
	paths []string
}

// dataSetFiles lays out n files of one size: a directory per 1,000 files.
func dataSetFiles(prefix string, size int64, n int) fsFileSet {
	s := fsFileSet{size: size, paths: make([]string, n)}
	for i := range n {
		s.paths[i] = fmt.Sprintf("%s/%03d/f%07d", prefix, i/1000, i)
	}
	return s
}

func (s fsFileSet) dirs(prefix string) []string {
	out := []string{prefix}
	for i := 0; i < len(s.paths); i += 1000 {
		out = append(out, fmt.Sprintf("%s/%03d", prefix, i/1000))
	}
	return out
}

// fsRun is one run of the fs workload.
type fsRun struct {
	cfg  *Config
	pat  fsPattern
	emit func(Result) error
}

func (c *Config) fsTargets() []fsTarget {
	var ts []fsTarget
	if c.FSNative != "" {
		ts = append(ts, &nativeTarget{name: c.FSNative, endpoint: c.Endpoint, rf: c.Replication, sync: c.FSSync,
			keyspace: fmt.Sprintf("bench-fs-%08x", rand.Uint32())})
	}
	for _, d := range c.FSDirs {
		ts = append(ts, &dirTarget{d: d, trunc: c.FSCreateTrunc})
	}
	return ts
}

func (c *Config) validateFS() []error {
	var problems []error
	if c.FSNative == "" && len(c.FSDirs) == 0 {
		problems = append(problems, errors.New("fs: no system to measure: give --native, --mount, --dir or --distributed"))
	}
	seen := map[string]bool{c.FSNative: c.FSNative != ""}
	for _, d := range c.FSDirs {
		if seen[d.Name] {
			problems = append(problems, fmt.Errorf("fs: two systems named %s", d.Name))
		}
		seen[d.Name] = true
	}
	for _, s := range []struct {
		flag string
		n    int64
	}{{"--large-file", c.FSLargeFile}, {"--small-file", c.FSSmallFile}} {
		if s.n < 1 || s.n > fsFileBytesMax {
			problems = append(problems, fmt.Errorf("%s %d: must be in [1, %d]", s.flag, s.n, int64(fsFileBytesMax)))
		}
	}
	if c.FSDataSet < c.FSLargeFile || c.FSDataSet > fsDataSetMax {
		problems = append(problems, fmt.Errorf("--data-set %d: must be in [--large-file, %d]", c.FSDataSet, int64(fsDataSetMax)))
	} else if c.FSSmallFile > 0 && c.FSDataSet/c.FSSmallFile > fsFilesMax {
		problems = append(problems, fmt.Errorf("--data-set %d: at most %d files of --small-file", c.FSDataSet, fsFilesMax))
	}
	if c.FSSmallFile == FSMetaFileBytes || c.FSLargeFile == FSMetaFileBytes || c.FSSmallFile >= c.FSLargeFile {
		problems = append(problems, fmt.Errorf("--small-file %d, --large-file %d: want small < large, neither %d bytes, "+
			"the size of the metadata phases' files", c.FSSmallFile, c.FSLargeFile, FSMetaFileBytes))
	}
	if c.FSMetaFiles < 1 || c.FSMetaFiles > fsFilesMax {
		problems = append(problems, fmt.Errorf("--meta-files %d: must be in [1, %d]", c.FSMetaFiles, fsFilesMax))
	}
	return problems
}

// runFS measures every fs system, cleaning up what each stored even when
// ctx is cancelled.
func runFS(ctx context.Context, cfg *Config, emit func(Result) error) (err error) {
	targets := cfg.fsTargets()
	var opened []fsTarget
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
		defer cancel()
		for _, t := range opened {
			cfg.progress("%s: removing bench data", t.Name())
			if cerr := t.Close(cctx); cerr != nil {
				err = errors.Join(err, fmt.Errorf("%s: %w", t.Name(), cerr))
			}
		}
	}()
	for _, t := range targets {
		opened = append(opened, t)
		octx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
		err := t.Open(octx)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", t.Name(), err)
		}
		cfg.progress("%s: %s", t.Name(), t.Info().Settings)
	}
	r := &fsRun{cfg: cfg, pat: newFSPattern(cfg.Seed), emit: emit}
	large := dataSetFiles("large", cfg.FSLargeFile, int(cfg.FSDataSet/cfg.FSLargeFile))
	small := dataSetFiles("small", cfg.FSSmallFile, int(cfg.FSDataSet/cfg.FSSmallFile))
	for _, set := range []struct {
		prefix string
		files  fsFileSet
	}{{"large", large}, {"small", small}} {
		for _, t := range targets {
			cfg.progress("%s: storing %d files of %s", t.Name(), len(set.files.paths), sizeLabel(set.files.size))
			if err := r.fill(ctx, t, set.prefix, set.files); err != nil {
				return fmt.Errorf("%s: storing the data set: %w", t.Name(), err)
			}
			if cfg.fsAfterFill != nil {
				if err := cfg.fsAfterFill(t, set.files.paths); err != nil {
					return err
				}
			}
		}
	}
	// Systems alternate within each measurement, so that drift of the
	// machine touches them alike.
	for _, set := range []fsFileSet{large, small} {
		for _, n := range cfg.Clients {
			for _, t := range targets {
				if err := r.measureReads(ctx, t, set, n, false); err != nil {
					return fmt.Errorf("%s: %w", t.Name(), err)
				}
				if t.Role() != RoleFSNative {
					continue
				}
				if err := r.measureReads(ctx, t, set, n, true); err != nil {
					return fmt.Errorf("%s: %w", BatchSystem(t.Name()), err)
				}
			}
		}
	}
	for _, size := range []int64{0, FSMetaFileBytes} {
		for _, n := range cfg.Clients {
			for _, t := range targets {
				if err := r.measureMeta(ctx, t, size, n); err != nil {
					return fmt.Errorf("%s: %w", t.Name(), err)
				}
			}
		}
	}
	for _, n := range cfg.Clients {
		for _, t := range targets {
			if err := r.measureUpdates(ctx, t, n); err != nil {
				return fmt.Errorf("%s: %w", t.Name(), err)
			}
		}
	}
	return ctx.Err()
}

// fill stores files on t, fsFillWorkers at once, each written whole (one
// write of the whole file through a directory), and emits the rate as the
// workload FSWriteWorkload(files.size).
func (r *fsRun) fill(ctx context.Context, t fsTarget, prefix string, files fsFileSet) error {
	c, err := t.Client(ctx)
	if err != nil {
		return err
	}
	for _, d := range files.dirs(prefix) {
		if err := r.op(ctx, func(ctx context.Context) error { return c.Mkdir(ctx, d) }); err != nil {
			_ = c.Close()
			return fmt.Errorf("mkdir %s: %w", d, err)
		}
	}
	_ = c.Close()
	n := min(fsFillWorkers, len(files.paths))
	res, _, err := r.timedFS(ctx, t, FSWriteWorkload(files.size), n, files.size, 0, nil,
		func(ctx context.Context, c fsClient, i, k int, buf []byte) (int, bool, error) {
			j := i + k*n
			if j >= len(files.paths) {
				return 0, false, nil
			}
			p, b := files.paths[j], buf[:files.size]
			r.pat.fill(p, b)
			if err := c.WriteFile(ctx, p, b); err != nil {
				return 0, false, fmt.Errorf("writing %s: %w", p, err)
			}
			return len(b), true, nil
		})
	if err != nil {
		return err
	}
	return r.emit(res)
}

// op runs fn under the run's operation timeout.
func (r *fsRun) op(ctx context.Context, fn func(ctx context.Context) error) error {
	octx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
	defer cancel()
	return fn(octx)
}

// fsStep is one operation of client i, its k-th; it returns the bytes it
// moved and false when the client has nothing left to do.
type fsStep func(ctx context.Context, c fsClient, i, k int, buf []byte) (int, bool, error)

// timedFS runs step in n clients, each on a client of its own, until
// bound (0: until every client is done) and summarizes the run. The first
// error of any client ends the measurement and is returned. done[i] is
// what client i completed. reserve, unless nil, is called on each client
// before the clock starts.
func (r *fsRun) timedFS(ctx context.Context, t fsTarget, workload string, n int, opBytes int64, bound time.Duration,
	reserve func(fsClient), step fsStep) (Result, []int, error) {
	clients := make([]fsClient, n)
	defer func() {
		for _, c := range clients {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	for i := range clients {
		c, err := t.Client(ctx)
		if err != nil {
			return Result{}, nil, err
		}
		clients[i] = c
		if reserve != nil {
			reserve(c)
		}
	}
	var (
		moved    atomic.Uint64
		firstErr error
		errOnce  sync.Once
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	done := make([]int, n)
	hists := make([]Histogram, n)
	start := time.Now()
	for i, c := range clients {
		wg.Go(func() {
			buf := make([]byte, opBytes+1)
			for k := 0; !stop.Load() && ctx.Err() == nil; k++ {
				if bound > 0 && time.Since(start) >= bound {
					return
				}
				octx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
				t0 := time.Now()
				m, more, err := step(octx, c, i, k, buf)
				d := time.Since(t0)
				cancel()
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					stop.Store(true)
					return
				}
				if !more {
					return
				}
				hists[i].Record(d)
				moved.Add(uint64(m))
				done[i]++
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return Result{}, done, fmt.Errorf("%s with %d clients: %w", workload, n, firstErr)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, done, err
	}
	var all Histogram
	for i := range hists {
		all.Merge(&hists[i])
	}
	res := summarize(workload, t.Name(), n, &all, moved.Load(), int(opBytes), 0, elapsed)
	res.Role, res.Note = t.Role(), t.Note()
	res.Settings = t.Info().Settings
	return res, done, nil
}

// measureReads has n readers read whole files of set: reader i reads
// files i, i+n, i+2n and so on, wrapping, so that a run reads every file
// once before it reads any twice. batched, each reader reads fsBatchBytes
// of files at once (batchReader: FetchMany), reported as the system
// BatchSystem(t.Name()), whose rates count files and latencies batches.
func (r *fsRun) measureReads(ctx context.Context, t fsTarget, set fsFileSet, n int, batched bool) error {
	wl, name := FSReadWorkload(set.size), t.Name()
	files, batch := len(set.paths), 1
	if batched {
		name = BatchSystem(name)
		batch = int(min(max(fsBatchBytes/set.size, 1), int64(tyrfs.FetchManyMax), int64(files)))
	}
	r.cfg.progress("%s: %s with %d readers for %s, %d files a read", name, wl, n, r.cfg.Duration, batch)
	res, _, err := r.timedFS(ctx, t, wl, n, set.size*int64(batch), r.cfg.Duration, reserveFor(batch, set.size),
		func(ctx context.Context, c fsClient, i, k int, buf []byte) (int, bool, error) {
			ps := make([]string, batch)
			for j := range ps {
				ps[j] = set.paths[(i+(k*batch+j)*n)%files]
			}
			var data [][]byte
			var err error
			if b, ok := c.(batchReader); batched && ok {
				data, err = b.ReadFiles(ctx, ps)
			} else if batched {
				err = errors.New("the system reads no batches")
			} else {
				var d []byte
				d, err = c.ReadFile(ctx, ps[0], buf)
				data = [][]byte{d}
			}
			if err != nil {
				return 0, false, fmt.Errorf("reading %s (%d files): %w", ps[0], batch, err)
			}
			moved := 0
			for j, p := range ps {
				if err := r.pat.check(p, data[j], int(set.size)); err != nil {
					return 0, false, err
				}
				moved += len(data[j])
			}
			return moved, true, nil
		})
	if err != nil {
		return err
	}
	if batched {
		res.System, res.OpBytes = name, int(set.size)
		res.Ops *= uint64(batch)
		res.OpsPerS = round(res.OpsPerS*float64(batch), 1)
		res.Note = fmt.Sprintf("%s: as %s, but each reader reads %d files at once with FetchMany (a node's share "+
			"pipelined on up to 4 connections); rates count files, latencies batches", name, t.Name(), batch)
	}
	return r.emit(res)
}

// measureMeta creates files of size bytes (empty or 4 KiB) for the
// duration, each client in a directory of its own, at most
// cfg.FSMetaFiles in all; stats them at random for the duration; reads
// the non-empty ones at random for the duration; then deletes them all.
func (r *fsRun) measureMeta(ctx context.Context, t fsTarget, size int64, n int) error {
	dir := fmt.Sprintf("meta-%s-%d", strings.TrimPrefix(fsMetaWorkload("x", size), "fs-x-"), n)
	filePath := func(i, k int) string { return fmt.Sprintf("%s/c%03d/f%07d", dir, i, k) }
	c, err := t.Client(ctx)
	if err != nil {
		return err
	}
	for _, d := range append([]string{dir}, func() []string {
		var ds []string
		for i := range n {
			ds = append(ds, fmt.Sprintf("%s/c%03d", dir, i))
		}
		return ds
	}()...) {
		if err := r.op(ctx, func(ctx context.Context) error { return c.Mkdir(ctx, d) }); err != nil {
			_ = c.Close()
			return fmt.Errorf("mkdir %s: %w", d, err)
		}
	}
	_ = c.Close()
	perClient := max(1, r.cfg.FSMetaFiles/n)
	emit := func(res Result, err error) error {
		if err != nil {
			return err
		}
		return r.emit(res)
	}
	wl := fsMetaWorkload("create", size)
	r.cfg.progress("%s: %s with %d clients for %s", t.Name(), wl, n, r.cfg.Duration)
	res, created, err := r.timedFS(ctx, t, wl, n, size, r.cfg.Duration, nil,
		func(ctx context.Context, c fsClient, i, k int, buf []byte) (int, bool, error) {
			if k >= perClient {
				return 0, false, nil
			}
			p := filePath(i, k)
			if size == 0 {
				return 0, true, c.Create(ctx, p)
			}
			b := buf[:size]
			r.pat.fill(p, b)
			return int(size), true, c.WriteFile(ctx, p, b)
		})
	if err := emit(res, err); err != nil {
		return err
	}
	pick := func(i, k int) (string, bool) {
		if created[i] == 0 {
			return "", false
		}
		rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(i)<<32|uint64(k)))
		return filePath(i, rng.IntN(created[i])), true
	}
	wl = fsMetaWorkload("stat", size)
	r.cfg.progress("%s: %s with %d clients for %s", t.Name(), wl, n, r.cfg.Duration)
	if err := emit(r.timed0(ctx, t, wl, n, 0, func(ctx context.Context, c fsClient, i, k int, _ []byte) (int, bool, error) {
		p, ok := pick(i, k)
		if !ok {
			return 0, false, nil
		}
		got, err := c.Stat(ctx, p)
		if err == nil && got != size {
			err = fmt.Errorf("stat %s: size %d, want %d", p, got, size)
		}
		return 0, true, err
	})); err != nil {
		return err
	}
	if size > 0 {
		wl = FSReadWorkload(size)
		r.cfg.progress("%s: %s with %d clients for %s", t.Name(), wl, n, r.cfg.Duration)
		if err := emit(r.timed0(ctx, t, wl, n, size, func(ctx context.Context, c fsClient, i, k int, buf []byte) (int, bool, error) {
			p, ok := pick(i, k)
			if !ok {
				return 0, false, nil
			}
			data, err := c.ReadFile(ctx, p, buf)
			if err == nil {
				err = r.pat.check(p, data, int(size))
			}
			return len(data), true, err
		})); err != nil {
			return err
		}
	}
	wl = fsMetaWorkload("delete", size)
	r.cfg.progress("%s: %s with %d clients, %d files", t.Name(), wl, n, sum(created))
	res, _, err = r.timedFS(ctx, t, wl, n, 0, 0, nil, func(ctx context.Context, c fsClient, i, k int, _ []byte) (int, bool, error) {
		if k >= created[i] {
			return 0, false, nil
		}
		return 0, true, c.Remove(ctx, filePath(i, k))
	})
	return emit(res, err)
}

// measureUpdates gives each client a file of FSUpdateFileBytes of its
// own, then has it write FSUpdateBytes at a random multiple of that in it,
// each write durable before the next, for the duration; then checks that
// each file kept its size and holds its last update, and deletes them.
func (r *fsRun) measureUpdates(ctx context.Context, t fsTarget, n int) error {
	dir := fmt.Sprintf("update-%d", n)
	filePath := func(i int) string { return fmt.Sprintf("%s/c%03d", dir, i) }
	// update returns the offset and content of client i's update k.
	update := func(i, k int, b []byte) int64 {
		rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(i)<<32|uint64(k)))
		r.pat.fill(fmt.Sprintf("%s#%d", filePath(i), k), b)
		return int64(rng.IntN(FSUpdateFileBytes/FSUpdateBytes)) * FSUpdateBytes
	}
	c, err := t.Client(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	if err := r.op(ctx, func(ctx context.Context) error { return c.Mkdir(ctx, dir) }); err != nil {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	buf := make([]byte, FSUpdateFileBytes+1)
	for i := range n {
		p := filePath(i)
		r.pat.fill(p, buf[:FSUpdateFileBytes])
		if err := r.op(ctx, func(ctx context.Context) error { return c.WriteFile(ctx, p, buf[:FSUpdateFileBytes]) }); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	wl := fsMetaWorkload("update", FSUpdateBytes)
	r.cfg.progress("%s: %s with %d clients for %s", t.Name(), wl, n, r.cfg.Duration)
	res, done, err := r.timedFS(ctx, t, wl, n, FSUpdateBytes, r.cfg.Duration, nil,
		func(ctx context.Context, c fsClient, i, k int, b []byte) (int, bool, error) {
			b = b[:FSUpdateBytes]
			off := update(i, k, b)
			return FSUpdateBytes, true, c.Update(ctx, filePath(i), off, b)
		})
	if err != nil {
		return err
	}
	if err := r.emit(res); err != nil {
		return err
	}
	want := make([]byte, FSUpdateBytes)
	for i := range n {
		p := filePath(i)
		data, err := c.ReadFile(ctx, p, buf)
		if err != nil {
			return fmt.Errorf("read %s after its updates: %w", p, err)
		}
		if len(data) != FSUpdateFileBytes {
			return fmt.Errorf("%s: %d bytes after its updates, want %d", p, len(data), FSUpdateFileBytes)
		}
		if done[i] > 0 {
			off := update(i, done[i]-1, want)
			if !bytes.Equal(data[off:off+FSUpdateBytes], want) {
				return fmt.Errorf("%s: its last update (%d at %d) did not land", p, done[i]-1, off)
			}
		}
		if err := c.Remove(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// timed0 is timedFS for the duration, each operation on one file of up
// to opBytes bytes, without the per-client counts.
func (r *fsRun) timed0(ctx context.Context, t fsTarget, wl string, n int, opBytes int64, step fsStep) (Result, error) {
	res, _, err := r.timedFS(ctx, t, wl, n, opBytes, r.cfg.Duration, reserveFor(1, opBytes), step)
	return res, err
}

// reserveFor is timedFS's reserve for reads of n files of size bytes at
// once.
func reserveFor(n int, size int64) func(fsClient) {
	return func(c fsClient) {
		if b, ok := c.(reserver); ok {
			b.Reserve(n, size)
		}
	}
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}
