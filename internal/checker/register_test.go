package checker

// These tests prove that CheckRegister accepts linearizable register
// histories, including ops of unknown outcome that took effect late or never,
// and reports stale reads, lost writes and reads of values never written.

import (
	"encoding/json"
	"math"
	"path/filepath"
	"testing"

	"github.com/tyrstore/tyr/internal/history"
)

// regBuilder builds register histories with explicit call and return
// times; ret < 0 means the outcome is unknown (info).
type regBuilder struct{ ops []history.Completed }

func (b *regBuilder) op(f string, typ history.Type, key, in, out string, call, ret int64) {
	var inV, outV *string
	if in != "" {
		inV = history.Str(in)
	}
	if out != "" {
		outV = history.Str(out)
	}
	inRaw, _ := json.Marshal(history.Register{Key: key, Value: inV})
	outRaw, _ := json.Marshal(history.Register{Key: key, Value: outV})
	if f == history.FWrite {
		outRaw = inRaw
	}
	if typ == history.Info {
		ret = math.MaxInt64
	}
	i := len(b.ops)
	b.ops = append(b.ops, history.Completed{Process: i, F: f, Type: typ, Index: i, Call: call, Return: ret,
		Input: inRaw, Output: outRaw})
}

func (b *regBuilder) write(key, v string, call, ret int64) {
	b.op(history.FWrite, history.OK, key, v, "", call, ret)
}
func (b *regBuilder) writeAs(typ history.Type, key, v string, call, ret int64) {
	b.op(history.FWrite, typ, key, v, "", call, ret)
}
func (b *regBuilder) read(key, got string, call, ret int64) {
	b.op(history.FRead, history.OK, key, "", got, call, ret)
}

func regKinds(r RegisterResult) map[string]int {
	out := map[string]int{}
	for _, a := range r.Anomalies {
		out[a.Kind]++
	}
	return out
}

func TestRegisterValid(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *regBuilder)
	}{
		{"sequential", func(b *regBuilder) {
			b.read("k", "", 0, 1)
			b.write("k", "a", 2, 3)
			b.read("k", "a", 4, 5)
			b.write("k", "b", 6, 7)
			b.read("k", "b", 8, 9)
		}},
		{"concurrent read sees either value", func(b *regBuilder) {
			b.write("k", "a", 0, 1)
			b.write("k", "b", 2, 10)
			b.read("k", "a", 3, 4)
			b.read("k", "b", 5, 6)
			b.read("k", "b", 11, 12)
		}},
		{"keys are independent", func(b *regBuilder) {
			b.write("x", "a", 0, 1)
			b.write("y", "b", 2, 3)
			b.read("x", "a", 4, 5)
			b.read("y", "b", 4, 5)
		}},
		{"info write that took effect long after", func(b *regBuilder) {
			b.write("k", "a", 0, 1)
			b.writeAs(history.Info, "k", "b", 2, 0)
			b.read("k", "a", 10, 11)
			b.read("k", "b", 20, 21)
		}},
		{"info write that never took effect", func(b *regBuilder) {
			b.write("k", "a", 0, 1)
			b.writeAs(history.Info, "k", "b", 2, 0)
			b.read("k", "a", 10, 11)
		}},
		{"failed write", func(b *regBuilder) {
			b.write("k", "a", 0, 1)
			b.writeAs(history.Fail, "k", "b", 2, 3)
			b.read("k", "a", 10, 11)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b regBuilder
			tc.build(&b)
			if r := CheckRegister(b.ops, RegisterOptions{}); !r.Valid() {
				t.Fatalf("valid history reported: %v", r.Anomalies)
			}
		})
	}
}

func TestRegisterAnomalies(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *regBuilder)
		want  []string
	}{
		{"stale read", func(b *regBuilder) {
			b.write("k", "a", 0, 1)
			b.write("k", "b", 2, 3)
			b.read("k", "a", 4, 5)
		}, []string{"nonlinearizable", "lost-write"}},
		{"acknowledged write lost", func(b *regBuilder) {
			b.write("k", "a", 0, 1)
			b.read("k", "", 4, 5)
		}, []string{"nonlinearizable", "lost-write"}},
		{"value never written", func(b *regBuilder) {
			b.write("k", "a", 0, 1)
			b.read("k", "zzz", 4, 5)
		}, []string{"phantom-read"}},
		{"value of a failed write", func(b *regBuilder) {
			b.writeAs(history.Fail, "k", "a", 0, 1)
			b.read("k", "a", 4, 5)
		}, []string{"phantom-read"}},
		{"read from the future", func(b *regBuilder) {
			b.read("k", "a", 0, 1)
			b.writeAs(history.Info, "k", "a", 2, 0)
		}, []string{"nonlinearizable"}},
		{"non-monotonic reads", func(b *regBuilder) {
			b.write("k", "a", 0, 1)
			b.write("k", "b", 2, 20)
			b.read("k", "b", 3, 4)
			b.read("k", "a", 5, 6)
		}, []string{"nonlinearizable"}},
		{"value flips back after an info write", func(b *regBuilder) {
			b.write("k", "a", 0, 1)
			b.writeAs(history.Info, "k", "b", 2, 0)
			b.read("k", "b", 10, 11)
			b.read("k", "a", 12, 13)
		}, []string{"nonlinearizable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b regBuilder
			tc.build(&b)
			r := CheckRegister(b.ops, RegisterOptions{VisualizePath: filepath.Join(t.TempDir(), "viz.html")})
			for _, k := range tc.want {
				if regKinds(r)[k] == 0 {
					t.Errorf("want %s, got %v", k, r.Anomalies)
				}
			}
			t.Log(r)
			for _, a := range r.Anomalies {
				t.Log("  ", a)
			}
		})
	}
}
