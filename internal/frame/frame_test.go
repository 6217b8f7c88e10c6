package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tyrstore/tyr/internal/limits"
)

func TestReadRoundTrip(t *testing.T) {
	for _, r := range []Read{
		{Kind: KindRead, Keyspace: "ks", Key: "k", Offset: 1, Length: 2, Version: 3, Flags: FlagConsistent | FlagUse},
		{Kind: KindRead, Keyspace: strings.Repeat("s", limits.KeyspaceNameBytesMax), Key: strings.Repeat("k", limits.KeyBytesMax),
			Offset: 1<<64 - 1, Length: 1<<64 - 1, Version: 1<<64 - 1},
		{Kind: KindRead},
		{Kind: KindFsFetch, Keyspace: "ks", Key: "/a/b", Length: 4 << 20, UID: 1000, GIDs: []uint32{100, 1<<32 - 1}},
		{Kind: KindFsFetch, Keyspace: strings.Repeat("s", limits.KeyspaceNameBytesMax), Key: strings.Repeat("k", limits.KeyBytesMax),
			UID: 1<<32 - 1, GIDs: make([]uint32, limits.FSGroupsMax)},
		{Kind: KindFsFetch},
	} {
		b := AppendRead(nil, r)
		n, err := RequestLen(b)
		if err != nil || n != len(b)-LenBytes {
			t.Fatalf("%+v: length %d, %v; want %d", r, n, err, len(b)-LenBytes)
		}
		got, err := DecodeRequest(b[LenBytes:])
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("decoded %+v, %v; want %+v", got, err, r)
		}
	}
	if err := CheckRead(Read{Key: strings.Repeat("k", limits.KeyBytesMax+1)}); !errors.Is(err, ErrMalformed) {
		t.Errorf("a key above the limit: %v, want ErrMalformed", err)
	}
	if err := CheckRead(Read{Kind: KindFsFetch, GIDs: make([]uint32, limits.FSGroupsMax+1)}); !errors.Is(err, ErrMalformed) {
		t.Errorf("groups above the limit: %v, want ErrMalformed", err)
	}
	fetch := AppendRead(nil, Read{Kind: KindFsFetch, Keyspace: "ks", Key: "/a", GIDs: []uint32{1, 2}})[LenBytes:]
	for name, body := range map[string][]byte{
		"a group cut short": fetch[:len(fetch)-1],
		"a group too many":  append(slices.Clone(fetch), 0, 0, 0, 0),
		"read flags":        append([]byte{KindFsFetch, FlagUse}, fetch[2:]...),
	} {
		if _, err := DecodeRequest(body); !errors.Is(err, ErrMalformed) {
			t.Errorf("a fetch with %s: %v, want ErrMalformed", name, err)
		}
	}
	if _, err := RequestLen(binary.LittleEndian.AppendUint32(nil, CommitBytesMax+1)); !errors.Is(err, ErrMalformed) {
		t.Errorf("a request above the limit: %v, want ErrMalformed", err)
	}
}

func TestCommitRoundTrip(t *testing.T) {
	for _, msg := range [][]byte{nil, []byte("\x0a\x02ks"), make([]byte, CommitBytesMax-1)} {
		b := AppendCommit(nil, msg)
		n, err := RequestLen(b)
		if err != nil || n != len(b)-LenBytes {
			t.Fatalf("a message of %d bytes: length %d, %v; want %d", len(msg), n, err, len(b)-LenBytes)
		}
		got, err := DecodeRequest(b[LenBytes:])
		if err != nil || got.Kind != KindCommit || !bytes.Equal(got.Message, msg) || got.Key != "" || got.Keyspace != "" {
			t.Fatalf("a message of %d bytes decoded as %+v, %v", len(msg), got.Kind, err)
		}
	}
	hello := AppendRequest(nil, Read{Kind: KindHello})
	if got, err := DecodeRequest(hello[LenBytes:]); err != nil || got.Kind != KindHello {
		t.Errorf("hello decoded as kind %d, %v", got.Kind, err)
	}
	if len(Magic)+len(hello) < 24 {
		t.Errorf("magic and hello of %d bytes: an HTTP/2 server waits for a 24-byte preface", len(Magic)+len(hello))
	}
	for _, bad := range [][]byte{hello[LenBytes : len(hello)-1], append(bytes.Clone(hello[LenBytes:]), 0), append(bytes.Clone(hello[LenBytes:len(hello)-1]), 1)} {
		if _, err := DecodeRequest(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("hello %x: %v, want ErrMalformed", bad, err)
		}
	}
	if _, err := RequestLen(AppendCommit(nil, make([]byte, CommitBytesMax))); !errors.Is(err, ErrMalformed) {
		t.Errorf("a commit above the limit: %v, want ErrMalformed", err)
	}
}

func TestResponseRoundTrip(t *testing.T) {
	h := Header{Code: 5, Flags: FlagRouting, RingID: 1, MembersID: 2, Size: 3, Version: 4}
	b := AppendResponse(nil, h, 7)
	got, tail, err := DecodeHeader(b)
	if err != nil || got != h || tail != 7 {
		t.Fatalf("decoded %+v, %d, %v; want %+v, 7", got, tail, err, h)
	}
	if _, _, err := DecodeHeader(AppendResponse(nil, h, MessageBytesMax+1)); !errors.Is(err, ErrMalformed) {
		t.Errorf("an error message above the limit: %v, want ErrMalformed", err)
	}
	if _, _, err := DecodeHeader(AppendResponse(nil, Header{}, limits.PayloadBytesMax+1)); !errors.Is(err, ErrMalformed) {
		t.Errorf("data above the limit: %v, want ErrMalformed", err)
	}
	if _, tail, err := DecodeHeader(AppendResponse(nil, Header{}, limits.PayloadBytesMax)); err != nil || tail != limits.PayloadBytesMax {
		t.Errorf("data at the limit: %d, %v", tail, err)
	}
}

// FuzzDecode feeds arbitrary bytes to both decoders: neither panics, a
// request that decodes encodes back to the same bytes, and a header that
// decodes is within the limits.
func FuzzDecode(f *testing.F) {
	f.Add(AppendRead(nil, Read{Keyspace: "ks", Key: "key", Offset: 5, Length: 10, Flags: FlagUse})[LenBytes:])
	f.Add(AppendRead(nil, Read{Kind: KindFsFetch, Keyspace: "ks", Key: "/a/b", Length: 10, UID: 7, GIDs: []uint32{8, 9}})[LenBytes:])
	f.Add(AppendCommit(nil, []byte("\x0a\x02ks"))[LenBytes:])
	f.Add(AppendRequest(nil, Read{Kind: KindHello})[LenBytes:])
	f.Add(AppendResponse(nil, Header{Code: 2, RingID: 9}, 3))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := DecodeRequest(b); err == nil {
			if again := AppendRequest(nil, r)[LenBytes:]; !bytes.Equal(again, b) {
				t.Fatalf("request %x decodes to %+v, which encodes to %x", b, r, again)
			}
		}
		if len(b) >= LenBytes+HeaderBytes {
			h, tail, err := DecodeHeader(b)
			if err == nil && (tail < 0 || tail > limits.PayloadBytesMax || (h.Code != 0 && tail > MessageBytesMax)) {
				t.Fatalf("header %x decodes with a tail of %d bytes", b[:LenBytes+HeaderBytes], tail)
			}
		}
	})
}
