package fusefs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/testserver"
)

// TestOpenWriteRace opens, reads, writes and closes one file from several
// goroutines through a mount that keeps pages and holds writes, while
// another mount keeps changing the file, so that opens find it changed
// and drop and refill the kernel's pages while writes are in progress. An
// open once held the node's lock while the kernel waited for the page
// locks of a write(2) whose request waited for that lock, and every
// process using the file hung. All must finish within the time allowed,
// and a write after them read back through the other mount.
func TestOpenWriteRace(t *testing.T) {
	needFUSE(t)
	c := testserver.Start(t).Client()
	newKeyspace(t, c, "open-write", 1, false)
	a := mountWith(t, c, "open-write", Options{CacheTimeout: time.Hour, HoldFor: time.Minute})
	b := mount(t, c, "open-write")
	pa, pb := filepath.Join(a, "f"), filepath.Join(b, "f")
	if err := os.WriteFile(pa, make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	writeAt := func(p string, flag int, data string) error {
		f, err := os.OpenFile(p, flag, 0)
		if err != nil {
			return err
		}
		buf := make([]byte, 64<<10)
		if flag == os.O_RDWR {
			_, _ = f.Read(buf)
		}
		_, err = f.WriteAt([]byte(data), int64(rand.IntN(60<<10)))
		return errors.Join(err, f.Close())
	}
	errs := make(chan error, 16)
	var writers sync.WaitGroup
	for g := range 8 {
		writers.Go(func() {
			for i := range 100 {
				if err := writeAt(pa, os.O_RDWR, fmt.Sprintf("g%d-%d", g, i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	done := make(chan struct{})
	var other sync.WaitGroup
	other.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			if err := writeAt(pb, os.O_WRONLY, "from b"); err != nil {
				errs <- err
				return
			}
		}
	})
	finished := make(chan struct{})
	go func() {
		writers.Wait()
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(2 * time.Minute):
		t.Fatal("the opens and writes through the mount did not finish in 2 minutes")
	}
	close(done)
	other.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := os.WriteFile(pa, []byte("last"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(pb); err != nil || string(got) != "last" {
		t.Fatalf("read through the other mount: %q, %v", got, err)
	}
}
