package checker

// These tests prove that the progress count pairs a history's events with
// the time of every completion, info included, and puts each op under the
// fault it overlapped longest, or under NoFault when it overlapped none.

import (
	"testing"

	"github.com/tyrstore/tyr/internal/history"
)

func TestSpans(t *testing.T) {
	ev := func(typ history.Type, process int, at int64) history.Event {
		return history.Event{Type: typ, F: history.FTxn, Process: process, Time: at}
	}
	events := []history.Event{
		ev(history.Invoke, 1, 0),
		ev(history.Invoke, 2, 1),
		ev(history.OK, 1, 5),
		ev(history.Invoke, 9, 6), // left out by keep
		{Type: history.Info, F: history.FTxn, Process: 2, Time: 7, Error: "timeout"},
		ev(history.Invoke, 3, 8),
		ev(history.Fail, 9, 9),
		ev(history.Invoke, 1, 10), // never completes
		ev(history.Fail, 3, 12),
	}
	got := Spans(events, func(p int) bool { return p != 9 })
	want := []Span{
		{0, 5, history.OK, ""},
		{1, 7, history.Info, "timeout"},
		{8, 12, history.Fail, ""},
		{10, 12, history.Info, ""},
	}
	if len(got) != len(want) {
		t.Fatalf("spans %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("span %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestProgress(t *testing.T) {
	windows := []Window{{"kill", 10, 20}, {"pause", 30, 40}}
	for _, c := range []struct {
		s    Span
		want string
	}{
		{Span{Call: 0, Return: 9, Type: history.OK}, NoFault},
		{Span{Call: 21, Return: 29, Type: history.OK}, NoFault},
		{Span{Call: 41, Return: 50, Type: history.OK}, NoFault},
		{Span{Call: 5, Return: 10, Type: history.Info}, "kill"},   // touches the window's start
		{Span{Call: 12, Return: 15, Type: history.Fail}, "kill"},  // inside
		{Span{Call: 18, Return: 33, Type: history.Info}, "pause"}, // 2 ns in the kill, 3 in the pause
		{Span{Call: 15, Return: 32, Type: history.Info}, "kill"},  // 5 ns in the kill, 2 in the pause
		{Span{Call: 0, Return: 100, Type: history.OK}, "kill"},    // both whole: the first of equal overlaps
	} {
		if got := Classify(c.s, windows); got != c.want {
			t.Errorf("Classify(%+v) = %s, want %s", c.s, got, c.want)
		}
	}
	spans := []Span{{Call: 0, Return: 9, Type: history.OK}, {Call: 0, Return: 9, Type: history.Fail}, {Call: 12, Return: 15, Type: history.Info}, {Call: 12, Return: 15, Type: history.OK},
		{Call: 12, Return: 15, Type: history.OK}, {Call: 12, Return: 15, Type: history.OK}}
	got := Progress(spans, windows)
	if got[NoFault] != (Tally{OK: 1, Fail: 1}) || got["kill"] != (Tally{OK: 3, Info: 1}) || len(got) != 2 {
		t.Fatalf("Progress = %v", got)
	}
	if u := got["kill"].Unsuccessful(); u != 0.25 {
		t.Errorf("kill: %v unsuccessful, want 0.25", u)
	}
	if s := FormatProgress(got); s != "kill 3/0/1 (25%), none 1/1/0 (50%)" {
		t.Errorf("FormatProgress = %q", s)
	}
}
