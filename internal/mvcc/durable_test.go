package mvcc

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tyrstore/tyr/internal/txn"
)

// gatedFS holds every WAL sync while gate is armed, so a test can look at
// the store between a commit becoming visible and it becoming durable.
type gatedFS struct {
	vfs.FS
	armed   atomic.Bool
	entered chan struct{} // a held sync began
	release chan struct{} // closed to let held syncs go on
}

func (fs *gatedFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return gatedFile{File: f, fs: fs}, nil
}

func (fs *gatedFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *gatedFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(newname, f, err)
}

type gatedFile struct {
	vfs.File
	fs *gatedFS
}

func (f gatedFile) hold() {
	if f.fs.armed.Load() {
		select {
		case f.fs.entered <- struct{}{}:
		default:
		}
		<-f.fs.release
	}
}

func (f gatedFile) Sync() error     { f.hold(); return f.File.Sync() }
func (f gatedFile) SyncData() error { f.hold(); return f.File.SyncData() }
func (f gatedFile) SyncTo(n int64) (bool, error) {
	f.hold()
	return f.File.SyncTo(n)
}

// A read must not return a commit that is visible in Pebble but whose WAL
// sync has not returned: a crash then would take back a value a reader saw.
// The same holds for Stat and List.
func TestReadsWaitForDurability(t *testing.T) {
	fs := &gatedFS{FS: vfs.NewMem(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	db, err := pebble.Open("db", &pebble.Options{FS: fs, Logger: testLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			fs.armed.Store(false)
			close(fs.release)
		}
	}
	defer func() { release(); _ = db.Close() }()
	s, err := Open(db, Options{MVCC: true, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	mustCommit(t, s, writeOp("k", "old"))

	fs.armed.Store(true)
	committed := make(chan error, 1)
	go func() {
		_, err := commit(s, writeOp("k", "new!"), writeOp("k2", "x"))
		committed <- err
	}()
	<-fs.entered
	// Wait until Pebble shows the new value to a raw read.
	for deadline := time.Now().Add(10 * time.Second); ; {
		m, ok, err := getMeta(db, "k2")
		if err != nil {
			t.Fatal(err)
		}
		if ok && m.Size == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the held commit never became visible")
		}
		time.Sleep(time.Millisecond)
	}

	type result struct {
		what string
		got  string
	}
	results := make(chan result, 3)
	go func() { results <- result{"read", readString(t, s, "k")} }()
	go func() {
		info, err := s.Stat("k2")
		got := "<absent>"
		if err == nil {
			got = fmt.Sprintf("size %d", info.Size)
		}
		results <- result{"stat", got}
	}()
	go func() {
		infos, _, err := s.List("k", "", 10)
		if err != nil {
			t.Error(err)
		}
		results <- result{"list", fmt.Sprint(len(infos))}
	}()
	early := 0
	for timeout := time.After(200 * time.Millisecond); early < 3; early++ {
		select {
		case r := <-results:
			t.Errorf("%s returned %q while the commit it may see was not yet durable", r.what, r.got)
			continue
		case <-timeout:
		}
		break
	}

	release()
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"read": "new!", "stat": "size 1", "list": "2"}
	for range 3 - early {
		r := <-results
		if r.got != want[r.what] {
			t.Errorf("%s after the sync: got %q, want %q", r.what, r.got, want[r.what])
		}
	}
}

// CommitLater writes without the sync: a crash before Store.Sync loses the
// commit, a crash after it keeps it, and reads of the blob wait for the
// Sync, while the commits staged after it see it at once.
func TestCommitLaterDurableAtSync(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := Options{MVCC: true, Sync: true}
	s := openStoreFS(t, fs, opts)
	mustCommit(t, s, writeOp("k", "old"))
	later := func(ops ...txn.Op) {
		t.Helper()
		p, err := s.Prepare(ops)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.CommitLater(); err != nil {
			t.Fatal(err)
		}
	}
	later(writeOp("k", "new"))
	if err := s.PutTxn("t1", []byte("r")); err != nil {
		t.Fatal(err)
	}
	// The next commit stages on top of the unsynced one.
	later(txn.Op{Key: "k", Kind: txn.OpAppend, Data: []byte("+")})

	s2 := openStoreFS(t, fs.CrashClone(vfs.CrashCloneCfg{}), opts)
	if got := readString(t, s2, "k"); got != "old" {
		t.Errorf("after a crash before Sync: k = %q, want the synced %q", got, "old")
	}
	if _, ok, _ := s2.Txn("t1"); ok {
		t.Error("after a crash before Sync: the PutTxn record survived")
	}

	read := make(chan string, 1)
	go func() { read <- readString(t, s, "k") }()
	select {
	case got := <-read:
		t.Fatalf("read returned %q before the Sync", got)
	case <-time.After(100 * time.Millisecond):
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := <-read; got != "new+" {
		t.Errorf("read after Sync = %q, want %q", got, "new+")
	}
	s3 := openStoreFS(t, fs.CrashClone(vfs.CrashCloneCfg{}), opts)
	if got := readString(t, s3, "k"); got != "new+" {
		t.Errorf("after a crash after Sync: k = %q, want %q", got, "new+")
	}
	if _, ok, _ := s3.Txn("t1"); !ok {
		t.Error("after a crash after Sync: the PutTxn record is gone")
	}
}
