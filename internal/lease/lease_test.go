package lease

import (
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/ring"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// TestUntil: the lease lasts while grants from a majority of the ring,
// this node included, are younger than Duration.
func TestUntil(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	tr := New(time.Second, c.now)
	others := []ring.NodeID{"b", "c", "d", "e"} // a ring of 5: 2 grants make a majority
	if u := tr.Until(others); !u.IsZero() {
		t.Fatalf("Until with no grants = %v, want the zero time", u)
	}
	tr.Received("b", c.t.Add(-300*time.Millisecond))
	if u := tr.Until(others); !u.IsZero() {
		t.Fatalf("Until with 2 of 5 = %v, want the zero time", u)
	}
	tr.Received("c", c.t.Add(-100*time.Millisecond))
	tr.Received("d", c.t.Add(-200*time.Millisecond))
	// The second newest grant completes the majority.
	if u, want := tr.Until(others), c.t.Add(800*time.Millisecond); !u.Equal(want) {
		t.Fatalf("Until = %v, want %v", u, want)
	}
	// An older grant does not replace a newer one.
	tr.Received("c", c.t.Add(-time.Hour))
	if u, want := tr.Until(others), c.t.Add(800*time.Millisecond); !u.Equal(want) {
		t.Fatalf("Until after an older grant = %v, want %v", u, want)
	}
	if u := tr.Until(nil); !u.After(c.t.Add(time.Hour)) || u.UnixNano() < c.t.UnixNano() {
		t.Fatalf("Until for a ring of one = %v, want far ahead", u)
	}
	if u, want := tr.Until([]ring.NodeID{"b"}), c.t.Add(700*time.Millisecond); !u.Equal(want) {
		t.Fatalf("Until for a ring of two = %v, want %v (b's grant)", u, want)
	}
}

// TestRevoke: a revoked node gets no grant for RevokeHold, and Revoke
// says how long ago the last grant was.
func TestRevoke(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	tr := New(time.Second, c.now)
	if _, granted := tr.Revoke("x"); granted {
		t.Fatal("Revoke reports a grant that was never given")
	}
	c.t = c.t.Add(tr.RevokeHold())
	if !tr.Grant("x") {
		t.Fatal("no grant after RevokeHold")
	}
	c.t = c.t.Add(300 * time.Millisecond)
	if age, granted := tr.Revoke("x"); !granted || age != 300*time.Millisecond {
		t.Fatalf("Revoke = %v, %t; want 300ms, true", age, granted)
	}
	c.t = c.t.Add(tr.RevokeHold() - time.Millisecond)
	if tr.Grant("x") {
		t.Fatal("granted within RevokeHold of a revocation")
	}
	if !tr.Grant("y") {
		t.Fatal("a revocation of x stopped grants to y")
	}
}
