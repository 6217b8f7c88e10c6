//go:build !tyr_broken_early_send

package outbox

import (
	"errors"
	"slices"
	"testing"
)

func TestOutbox(t *testing.T) {
	var o Outbox[string]
	if got := o.Put("a"); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Put with nothing written = %v, want [a] at once", got)
	}
	if _, ok := o.StartSync(); ok {
		t.Fatal("StartSync with nothing written began a sync")
	}
	o.Wrote()
	if got := o.Put("b", "c"); got != nil {
		t.Fatalf("Put after an unsynced write = %v, want nothing", got)
	}
	upTo, ok := o.StartSync()
	if !ok || upTo != 1 {
		t.Fatalf("StartSync = %d, %t; want 1, true", upTo, ok)
	}
	// Written during the sync: not covered by it.
	o.Wrote()
	if got := o.Put("d"); got != nil {
		t.Fatalf("Put during a sync = %v, want nothing", got)
	}
	if _, ok := o.StartSync(); ok {
		t.Fatal("a second sync began while one was in flight")
	}
	if got := o.Synced(upTo); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("Synced(1) = %v, want [b c]", got)
	}
	// Nothing written after d: e still waits behind it, in order.
	if got := o.Put("e"); got != nil {
		t.Fatalf("Put behind a held output = %v, want nothing", got)
	}
	upTo, _ = o.StartSync()
	if got := o.Synced(upTo); !slices.Equal(got, []string{"d", "e"}) {
		t.Fatalf("Synced(%d) = %v, want [d e]", upTo, got)
	}
	if _, ok := o.StartSync(); ok {
		t.Fatal("a sync began with every write synced")
	}
	if got := o.Put("f"); !slices.Equal(got, []string{"f"}) {
		t.Fatalf("Put with everything synced = %v, want [f] at once", got)
	}
}

func TestOutboxDrop(t *testing.T) {
	var o Outbox[int]
	o.Wrote()
	o.Put(1, 2)
	o.StartSync()
	if n := o.Drop(); n != 2 {
		t.Fatalf("Drop = %d, want 2", n)
	}
	if got := o.Put(3); !slices.Equal(got, []int{3}) {
		t.Fatalf("Put after Drop = %v, want [3]", got)
	}
}

func TestOutboxAssertsOneSync(t *testing.T) {
	var o Outbox[int]
	defer func() {
		var ae *AssertionError
		if err, _ := recover().(error); !errors.As(err, &ae) {
			t.Fatalf("Synced with no sync in flight: recovered %v, want an *AssertionError", err)
		}
	}()
	o.Synced(1)
}
