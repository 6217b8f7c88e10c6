package checker

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tyrstore/tyr/internal/history"
)

// Progress: the checkers above accept any number of failed and unknown
// outcomes, so a store that refuses or loses most of its work passes them.
// A progress check counts the outcomes of a workload by the fault in effect
// while each op ran, for the caller to bound.

// NoFault is the class of an op that overlapped no fault window.
const NoFault = "none"

// Span is one op's time span and outcome. Times are nanoseconds on the
// clock of the windows it is classified against.
type Span struct {
	Call, Return int64
	Type         history.Type // history.OK, history.Fail or history.Info
	Error        string       // why it failed or ended unknown
}

// Spans pairs the events of a history into spans, for the processes keep
// accepts (nil: all). Unlike history.Pair it keeps the time of an info
// completion: when the client gave up, which is when the op stopped
// counting as work in progress. An invocation never completed is info and
// returns at the history's last event.
func Spans(events []history.Event, keep func(process int) bool) []Span {
	var out []Span
	open := map[int]int{} // process -> position in out of its open op
	var last int64
	for _, e := range events {
		last = max(last, e.Time)
		if keep != nil && !keep(e.Process) {
			continue
		}
		if e.Type == history.Invoke {
			open[e.Process] = len(out)
			out = append(out, Span{Call: e.Time, Return: -1, Type: history.Info})
			continue
		}
		i, ok := open[e.Process]
		if !ok {
			continue // history.Pair reports such a history; nothing to count
		}
		delete(open, e.Process)
		out[i].Return, out[i].Type, out[i].Error = e.Time, e.Type, e.Error
	}
	for _, i := range open {
		out[i].Return = last
	}
	return out
}

// Window is a period in which a fault of a kind was in effect: from the
// moment the fault was injected until it was healed and the node it hit
// was back (restarted, resumed, reconnected, caught up).
type Window struct {
	Kind     string
	From, To int64
}

// Classify returns the kind of the window s overlaps longest, or NoFault
// if it overlaps none: an op that ran even partly during a fault counts
// under that fault, so NoFault holds only the ops that ran entirely in
// fault-free time.
func Classify(s Span, windows []Window) string {
	kind, best := NoFault, int64(-1)
	for _, w := range windows {
		overlap := min(s.Return, w.To) - max(s.Call, w.From)
		if overlap >= 0 && overlap > best {
			kind, best = w.Kind, overlap
		}
	}
	return kind
}

// Tally counts outcomes.
type Tally struct{ OK, Fail, Info int }

// Add counts one outcome.
func (t *Tally) Add(typ history.Type) {
	switch typ {
	case history.OK:
		t.OK++
	case history.Fail:
		t.Fail++
	default:
		t.Info++
	}
}

// Plus returns the sum of two tallies.
func (t Tally) Plus(u Tally) Tally { return Tally{t.OK + u.OK, t.Fail + u.Fail, t.Info + u.Info} }

// Total is the number of ops counted.
func (t Tally) Total() int { return t.OK + t.Fail + t.Info }

// Unsuccessful is the share of the ops that failed or ended unknown; 0 if
// there were none.
func (t Tally) Unsuccessful() float64 {
	if t.Total() == 0 {
		return 0
	}
	return float64(t.Fail+t.Info) / float64(t.Total())
}

// String formats the tally as "ok/fail/info".
func (t Tally) String() string { return fmt.Sprintf("%d/%d/%d", t.OK, t.Fail, t.Info) }

// Progress counts the outcomes of spans by the class of each (Classify).
func Progress(spans []Span, windows []Window) map[string]Tally {
	out := map[string]Tally{}
	for _, s := range spans {
		k := Classify(s, windows)
		t := out[k]
		t.Add(s.Type)
		out[k] = t
	}
	return out
}

// FormatProgress formats tallies by class as
// "kill 10/2/3 (33%), none 40/1/0 (2%)", classes sorted, NoFault last.
func FormatProgress(tallies map[string]Tally) string {
	if len(tallies) == 0 {
		return "-"
	}
	kinds := slices.Sorted(maps.Keys(tallies))
	if i := slices.Index(kinds, NoFault); i >= 0 {
		kinds = append(slices.Delete(kinds, i, i+1), NoFault)
	}
	var parts []string
	for _, k := range kinds {
		t := tallies[k]
		parts = append(parts, fmt.Sprintf("%s %v (%.0f%%)", k, t, 100*t.Unsuccessful()))
	}
	return strings.Join(parts, ", ")
}
