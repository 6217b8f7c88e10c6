package lease

import (
	"testing"
	"time"

	"github.com/tyrstore/tyr/internal/ring"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestValid(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	tr := New(time.Second, c.now)
	live := []ring.NodeID{"b", "c"}
	if ok, missing := tr.Valid(live, 3); ok || missing != "b" {
		t.Fatalf("Valid with no grants = %t, %q; want false, b", ok, missing)
	}
	tr.Received("b", c.t)
	tr.Received("c", c.t.Add(-500*time.Millisecond))
	if ok, _ := tr.Valid(live, 3); !ok {
		t.Fatal("Valid with fresh grants from every live member = false")
	}
	// An older grant does not replace a newer one.
	tr.Received("b", c.t.Add(-time.Hour))
	c.t = c.t.Add(499 * time.Millisecond)
	if ok, _ := tr.Valid(live, 3); !ok {
		t.Fatal("Valid just before c's grant runs out = false")
	}
	c.t = c.t.Add(time.Millisecond)
	if ok, missing := tr.Valid(live, 3); ok || missing != "c" {
		t.Fatalf("Valid once c's grant (sent a second ago) ran out = %t, %q; want false, c", ok, missing)
	}
	// Members this node considers dead do not count, but a majority must.
	if ok, _ := tr.Valid([]ring.NodeID{"b"}, 3); !ok {
		t.Fatal("Valid with b's fresh grant, c dead, 2 of 3 = false")
	}
	if ok, _ := tr.Valid([]ring.NodeID{"b"}, 4); ok {
		t.Fatal("Valid with 2 of 4 members = true; a majority is 3")
	}
	if ok, _ := tr.Valid(nil, 1); !ok {
		t.Fatal("Valid for a one-node ring = false")
	}
}

func TestFenced(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	tr := New(time.Second, c.now)
	if tr.Fenced("x") {
		t.Fatal("fenced before any grant")
	}
	tr.Grant("x")
	c.t = c.t.Add(999 * time.Millisecond)
	if !tr.Fenced("x") {
		t.Fatal("not fenced within a Duration of the grant")
	}
	c.t = c.t.Add(time.Millisecond)
	if tr.Fenced("x") {
		t.Fatal("still fenced a Duration after the grant")
	}
}
