// Tests for the keyspace rules: every keyspace-name rule, every blob-key rule
// and every config rule, each with inputs that pass and inputs that fail.
// Each invalid input must be reported as errs.ErrInvalidArgument (so the
// server answers InvalidArgument), and the message must name the rule broken.
//
// Reproduce a failure with:
//
//	go test -race -count=1 -run 'TestValidateName|TestValidateKey|TestConfig' -v ./internal/keyspace/
package keyspace

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tyrstore/tyr/internal/errs"
	"github.com/tyrstore/tyr/internal/limits"
)

// checkErr fails unless err matches want: "" means no error; otherwise err
// must be ErrInvalidArgument and its message must contain want.
func checkErr(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: unexpected error %v", what, err)
	case want != "" && err == nil:
		t.Errorf("%s: no error, want one containing %q", what, want)
	case want != "" && !errors.Is(err, errs.ErrInvalidArgument):
		t.Errorf("%s: error %v is not ErrInvalidArgument", what, err)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("%s: error %q does not contain %q", what, err, want)
	}
}

func TestValidateName(t *testing.T) {
	const (
		length  = "length must be in"
		charset = "only a-z, 0-9"
		ends    = "must start and end"
		dots    = `must not contain ".."`
	)
	tests := []struct {
		name string
		want string // "" = valid, else part of the error
	}{
		// Length bounds.
		{"abc", ""},
		{strings.Repeat("a", limits.KeyspaceNameBytesMax), ""},
		{"", length},
		{"a", length},
		{"ab", length},
		{strings.Repeat("a", limits.KeyspaceNameBytesMax+1), length},
		// Allowed characters.
		{"0123456789", ""},
		{"abcdefghijklmnopqrstuvwxyz", ""},
		{"my-bucket.v2", ""},
		{"a-b", ""},
		{"a.b", ""},
		{"a--b", ""},
		{"a-.b", ""},
		{"ABC", charset},
		{"abC", charset},
		{"a_b", charset},
		{"a b", charset},
		{"a/b", charset},
		{"a\x00b", charset},
		{"añb", charset},
		{"日本語", charset},
		// First and last characters.
		{"-ab", ends},
		{"ab-", ends},
		{".ab", ends},
		{"ab.", ends},
		{"...", ends},
		// No "..".
		{"a..b", dots},
		{"ab..cd", dots},
	}
	for _, tt := range tests {
		checkErr(t, fmt.Sprintf("ValidateName(%.40q)", tt.name), ValidateName(tt.name), tt.want)
	}
}

func TestValidateKey(t *testing.T) {
	tests := []struct {
		key  string
		want string
	}{
		{"a", ""},
		{"a/b/c", ""},
		{"/", ""},
		{"with space", ""},
		{"ünïcödé/日本語/🙂", ""},
		{"\x01\x7f", ""},
		{"\U0010FFFF", ""},
		{strings.Repeat("k", limits.KeyBytesMax), ""},
		{strings.Repeat("é", limits.KeyBytesMax/2), ""},
		{"", "empty"},
		{strings.Repeat("k", limits.KeyBytesMax+1), "longer than the limit"},
		{strings.Repeat("é", limits.KeyBytesMax/2) + "k", "longer than the limit"},
		{"\xff", "not valid UTF-8"},
		{"a\xc3", "not valid UTF-8"},        // truncated sequence
		{"\xed\xa0\x80", "not valid UTF-8"}, // surrogate
		{"\x00", "NUL byte at 0"},
		{"ab\x00", "NUL byte at 2"},
	}
	for _, tt := range tests {
		checkErr(t, fmt.Sprintf("ValidateKey(%.40q)", tt.key), ValidateKey(tt.key), tt.want)
	}
}

func TestConfigValidate(t *testing.T) {
	const (
		chunkRange = "chunk size"
		pow2       = "not a power of two"
		repl       = "replication"
	)
	tests := []struct {
		cfg  Config
		want []string // nil = valid
	}{
		{DefaultConfig(), nil},
		{Config{ChunkBytes: limits.ChunkBytesMin, Replication: 1}, nil},
		{Config{ChunkBytes: limits.ChunkBytesMax, Replication: limits.ReplicationMax}, nil},
		{Config{ChunkBytes: 1 << 20, Replication: 3, MVCC: true, Sync: false}, nil},
		{Config{ChunkBytes: 0, Replication: 1}, []string{chunkRange, "out of range"}},
		{Config{ChunkBytes: limits.ChunkBytesMin / 2, Replication: 1}, []string{chunkRange, "out of range"}},
		{Config{ChunkBytes: limits.ChunkBytesMin - 1, Replication: 1}, []string{"out of range"}},
		{Config{ChunkBytes: limits.ChunkBytesMax + 1, Replication: 1}, []string{"out of range"}},
		{Config{ChunkBytes: limits.ChunkBytesMax * 2, Replication: 1}, []string{"out of range"}},
		{Config{ChunkBytes: 1<<63 + 1, Replication: 1}, []string{"out of range"}},
		{Config{ChunkBytes: limits.ChunkBytesMin + 1, Replication: 1}, []string{pow2}},
		{Config{ChunkBytes: 3 << 20, Replication: 1}, []string{pow2}},
		{Config{ChunkBytes: limits.ChunkBytesMax - 1, Replication: 1}, []string{pow2}},
		{Config{ChunkBytes: 1 << 20, Replication: 0}, []string{repl + " 0 out of range"}},
		{Config{ChunkBytes: 1 << 20, Replication: limits.ReplicationMax + 1}, []string{repl, "out of range"}},
		{Config{ChunkBytes: 1 << 20, Replication: ^uint32(0)}, []string{repl}},
		// Every problem is reported, not just the first.
		{Config{ChunkBytes: 5000, Replication: 0}, []string{pow2, repl}},
		{Config{}, []string{chunkRange, repl}},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		what := fmt.Sprintf("%+v.Validate()", tt.cfg)
		if tt.want == nil {
			checkErr(t, what, err, "")
			continue
		}
		for _, w := range tt.want {
			checkErr(t, what, err, w)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	got := Config{MVCC: true}.WithDefaults()
	want := Config{ChunkBytes: limits.ChunkBytesDefault, Replication: 1, MVCC: true}
	if got != want {
		t.Errorf("WithDefaults of zero config = %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("defaulted config invalid: %v", err)
	}
	set := Config{ChunkBytes: 8 << 10, Replication: 3, Sync: true}
	if got := set.WithDefaults(); got != set {
		t.Errorf("WithDefaults changed set fields: %+v -> %+v", set, got)
	}
	// Defaults fill zeros only; they do not repair invalid values.
	if err := (Config{ChunkBytes: 5000}).WithDefaults().Validate(); err == nil {
		t.Error("WithDefaults made an invalid chunk size valid")
	}
	d := DefaultConfig()
	if d != (Config{ChunkBytes: limits.ChunkBytesDefault, Replication: 1, MVCC: true, Sync: true}) {
		t.Errorf("DefaultConfig = %+v", d)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("DefaultConfig invalid: %v", err)
	}
}
