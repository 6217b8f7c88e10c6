package fslayout

import (
	"maps"
	"strings"
	"testing"
)

// TestCheckStaples starts from a file system holding a staple whose data
// moved to a hidden blob and a staple whose data kept its old path, checks
// it passes, then breaks it in each way invariant 5 rules out, one way at a
// time (CheckStaples visits keys in map order, so each broken layout breaks
// one rule only).
func TestCheckStaples(t *testing.T) {
	header := func(flags uint16) []byte {
		h := EncodeHeader(Attr{Kind: KindFile, Mode: 0o644})
		SetFlags(h, flags)
		return h
	}
	hidden := HiddenKey(7)
	good := map[string][]byte{
		"/":          EncodeHeader(Attr{Kind: KindDir, Mode: 0o755}),
		"/plain":     header(0),
		"/a":         header(FlagStapled),
		"~/a":        []byte("/old"),
		"/old":       header(FlagMovedOut),
		"^/old":      []byte("/a"),
		"/b":         header(FlagStapled),
		"~/b":        []byte(hidden),
		hidden:       header(FlagMovedOut),
		"^" + hidden: []byte("/b"),
	}
	if err := CheckStaples(good); err != nil {
		t.Fatalf("a good layout: %v", err)
	}
	for _, tt := range []struct {
		name   string
		change func(m map[string][]byte)
		want   string
	}{
		{"pointer naming no path", func(m map[string][]byte) { m["~x"] = []byte("/old") }, "names no path"},
		{"pointer of a plain file", func(m map[string][]byte) { m["~/plain"] = []byte("/x") }, "is no staple"},
		{"two staples of one data blob", func(m map[string][]byte) { m["~/b"] = []byte("/old") }, "has two staples"},
		{"staple without a pointer", func(m map[string][]byte) { delete(m, "~/a"); delete(m, "/old"); delete(m, "^/old") }, "has no pointer"},
		{"data blob without a staple", func(m map[string][]byte) { delete(m, "~/a"); m["/a"] = header(0) }, "is no staple's"},
		{"back name to another path", func(m map[string][]byte) { m["^/old"] = []byte("/b") }, "has back name"},
		{"data blob without a back name", func(m map[string][]byte) { delete(m, "^/old") }, "has back name"},
		{"back name of no data blob", func(m map[string][]byte) { m["^/plain"] = []byte("/a") }, "no data blob"},
		{"hidden blob not moved out", func(m map[string][]byte) { m[HiddenKey(9)] = header(0) }, "is no data blob"},
		{"path without a header", func(m map[string][]byte) { m["/short"] = []byte("TYRF") }, "has no header"},
		{"key of no kind", func(m map[string][]byte) { m["junk"] = header(0) }, "no path and no blob of a staple"},
	} {
		m := maps.Clone(good)
		tt.change(m)
		if err := CheckStaples(m); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.want)
		}
	}
}

func TestIsHiddenKey(t *testing.T) {
	for _, id := range []uint64{0, 7, 1 << 63, ^uint64(0)} {
		if k := HiddenKey(id); !IsHiddenKey(k) {
			t.Errorf("IsHiddenKey(%q) = false", k)
		}
	}
	for _, k := range []string{"", "%", "%7", "%00000000000000070", "%000000000000000G", "%000000000000000A",
		"/%0000000000000007", "^%0000000000000007", "%+000000000000007"} {
		if IsHiddenKey(k) {
			t.Errorf("IsHiddenKey(%q) = true", k)
		}
	}
}
