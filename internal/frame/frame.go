// Package frame is the encoding of tyr's data path: reads and commits
// travel as length-prefixed binary frames over plain TCP, beside gRPC, on
// the same port. A read's payload is never copied into a message encoding:
// its response is a fixed header followed by the bytes read, written with
// one vectored write and read straight into the caller's buffer. A commit
// carries its gRPC message as it is, without HTTP/2's framing and streams.
//
// A connection opens with Magic, which tells it from an HTTP/2 (gRPC)
// connection on the same listener. Then the client sends requests and the
// server answers each, in order; a client may send several before reading
// their answers (pipelining), and the server then writes the answers of
// the requests it already holds together:
//
//	request:  u32 body length | u8 kind | u8 flags | u64 offset | u64 length
//	          | u64 version | u8 keyspace length | keyspace | u16 key length | key
//	          [ | u32 uid | u8 group count | u32 gid... ]   (KindFsFetch only)
//	          or: u32 body length | u8 kind (KindCommit) | message
//	          or: u32 body length | u8 kind (KindHello) | 19 zero bytes
//	response: u32 body length | u8 code | u8 flags | u64 ring ID | u64 members ID
//	          | u64 size | u64 version | data (code 0) or message (otherwise)
//
// A KindRead is a tyrpb.ReadRequest; a KindFsFetch is a
// tyrpb.FsFetchRequest, its key the path, and its answer with FlagErrno
// a file-system refusal, the errno in size. A KindCommit's message is a
// tyrpb.CommitRequest in protobuf, and its answer's data a
// tyrpb.CommitResponse (size and version zero); FlagRefused marks a failed
// commit the server refused for certain, as the gRPC path's "tyr-refused"
// trailer does. A client learns that a server takes commits from a
// KindHello on the connection first: a server that answers nothing to
// it (one without the data path, or of an earlier version, closes the
// connection) is never sent a commit, whose loss could not be told from
// a commit lost after it arrived.
//
// Integers are little-endian. code is a gRPC status code, so that errors
// keep their class; the routing IDs are those the gRPC path puts in its
// headers (FlagRouting says they are present). Every length is bounded
// (RequestBytesMax, ResponseBytesMax, limits.PayloadBytesMax): a frame
// that breaks a bound, or a body that does not decode exactly, ends the
// connection.
package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tyrstore/tyr/internal/limits"
)

// Magic opens every data-path connection. An HTTP/2 connection opens with
// "PRI ", so the two never clash.
var Magic = [4]byte{'T', 'Y', 'R', 1}

// Kinds of request.
const (
	KindRead byte = 1 + iota
	KindFsFetch
	KindCommit
	// KindHello asks what the server takes besides reads and fetches: its
	// answer's size holds Features bits. Its body is the kind and
	// helloPadBytes zeros, so that a server of HTTP/2 alone reads a whole
	// 24-byte preface from it, and refuses it at once.
	KindHello
)

const helloPadBytes = 19

// Features, the bits of a KindHello's answer's size.
const (
	// FeatureCommits: the server takes KindCommit.
	FeatureCommits uint64 = 1 << iota
)

// Read request flags, as in tyrpb.ReadRequest.
const (
	FlagConsistent byte = 1 << iota
	FlagUse
)

// Response flags.
const (
	// FlagRouting: the ring and members IDs are the answering node's.
	FlagRouting byte = 1 << iota
	// FlagErrno: a TýrFS fetch refused; Size holds the errno.
	FlagErrno
	// FlagRefused: a commit that failed was refused for certain: it
	// changed nothing and never will.
	FlagRefused
)

// Sizes.
const (
	// LenBytes is the size of a frame's length prefix.
	LenBytes = 4
	// readFixedBytes is the fixed part of a read request's body.
	readFixedBytes = 1 + 1 + 8 + 8 + 8 + 1 + 2
	// credBytesMax is the largest credentials part of a fetch.
	credBytesMax = 4 + 1 + 4*limits.FSGroupsMax
	// RequestBytesMax bounds a read's or a fetch's body: a fetch of the
	// longest keyspace name and key, with the most groups.
	RequestBytesMax = readFixedBytes + limits.KeyspaceNameBytesMax + limits.KeyBytesMax + credBytesMax
	// CommitBytesMax bounds a commit's body: the kind and the largest
	// message the gRPC path accepts.
	CommitBytesMax = 1 + limits.MessageBytesMax
	// HeaderBytes is the fixed part of a response's body.
	HeaderBytes = 1 + 1 + 8 + 8 + 8 + 8
	// MessageBytesMax bounds an error message; a longer one is cut.
	MessageBytesMax = 4 << 10
	// ResponseBytesMax bounds a response's body.
	ResponseBytesMax = HeaderBytes + limits.PayloadBytesMax
)

// ErrMalformed is the error of a frame that does not decode.
var ErrMalformed = errors.New("malformed data-path frame")

// Read is a request: a read, or with Kind KindFsFetch a TýrFS fetch of
// path Key for UID and GIDs (Offset and Version zero), or with Kind
// KindCommit a commit, its Message alone set.
type Read struct {
	Kind     byte // KindRead if zero
	Keyspace string
	Key      string
	Offset   uint64
	Length   uint64
	Version  uint64
	Flags    byte
	UID      uint32
	GIDs     []uint32
	// Message is a commit's encoded tyrpb.CommitRequest. Decoded, it
	// aliases the body.
	Message []byte
}

// AppendRead appends r's frame, length prefix included, to b.
func AppendRead(b []byte, r Read) []byte {
	kind := max(r.Kind, KindRead)
	n := readFixedBytes + len(r.Keyspace) + len(r.Key)
	if kind == KindFsFetch {
		n += 4 + 1 + 4*len(r.GIDs)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	b = append(b, kind, r.Flags)
	b = binary.LittleEndian.AppendUint64(b, r.Offset)
	b = binary.LittleEndian.AppendUint64(b, r.Length)
	b = binary.LittleEndian.AppendUint64(b, r.Version)
	b = append(b, byte(len(r.Keyspace)))
	b = append(b, r.Keyspace...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(r.Key)))
	b = append(b, r.Key...)
	if kind == KindFsFetch {
		b = binary.LittleEndian.AppendUint32(b, r.UID)
		b = append(b, byte(len(r.GIDs)))
		for _, g := range r.GIDs {
			b = binary.LittleEndian.AppendUint32(b, g)
		}
	}
	return b
}

// AppendRequest appends r's frame: AppendCommit's for a commit, a
// hello's, or AppendRead's.
func AppendRequest(b []byte, r Read) []byte {
	switch r.Kind {
	case KindCommit:
		return AppendCommit(b, r.Message)
	case KindHello:
		b = append(binary.LittleEndian.AppendUint32(b, 1+helloPadBytes), KindHello)
		return append(b, make([]byte, helloPadBytes)...)
	}
	return AppendRead(b, r)
}

// AppendCommit appends the frame of a commit of message (an encoded
// tyrpb.CommitRequest, at most CommitBytesMax-1 bytes), length prefix
// included, to b.
func AppendCommit(b []byte, message []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(1+len(message)))
	b = append(b, KindCommit)
	return append(b, message...)
}

// CheckRead reports whether r fits a request frame: the names' lengths
// within their limits (the server checks their contents).
func CheckRead(r Read) error {
	if len(r.Keyspace) > limits.KeyspaceNameBytesMax || len(r.Key) > limits.KeyBytesMax {
		return fmt.Errorf("%w: keyspace name of %d bytes or key of %d bytes above the limits (%d, %d)",
			ErrMalformed, len(r.Keyspace), len(r.Key), limits.KeyspaceNameBytesMax, limits.KeyBytesMax)
	}
	if len(r.GIDs) > limits.FSGroupsMax {
		return fmt.Errorf("%w: %d groups, above %d", ErrMalformed, len(r.GIDs), limits.FSGroupsMax)
	}
	return nil
}

// RequestLen decodes a request's length prefix, checking it against
// CommitBytesMax, the larger bound (DecodeRequest checks a read's).
func RequestLen(prefix []byte) (int, error) {
	n := binary.LittleEndian.Uint32(prefix)
	if n == 0 || n > CommitBytesMax {
		return 0, fmt.Errorf("%w: request of %d bytes, limit %d", ErrMalformed, n, CommitBytesMax)
	}
	return int(n), nil
}

// DecodeRequest decodes a request's body (after the length prefix). The
// strings are copies, but a commit's Message is not: the caller decodes it
// before it reuses body.
func DecodeRequest(body []byte) (Read, error) {
	var r Read
	if len(body) > 0 && body[0] == KindCommit {
		r.Kind, r.Message = KindCommit, body[1:]
		return r, nil
	}
	if len(body) == 1+helloPadBytes && body[0] == KindHello && bytes.Count(body, []byte{0}) == helloPadBytes {
		r.Kind = KindHello
		return r, nil
	}
	if len(body) < readFixedBytes || len(body) > RequestBytesMax || (body[0] != KindRead && body[0] != KindFsFetch) {
		return r, fmt.Errorf("%w: request of %d bytes", ErrMalformed, len(body))
	}
	r.Kind, r.Flags = body[0], body[1]
	if r.Flags&^(FlagConsistent|FlagUse) != 0 || (r.Kind == KindFsFetch && r.Flags != 0) {
		return r, fmt.Errorf("%w: unknown read flags %#x", ErrMalformed, r.Flags)
	}
	r.Offset = binary.LittleEndian.Uint64(body[2:])
	r.Length = binary.LittleEndian.Uint64(body[10:])
	r.Version = binary.LittleEndian.Uint64(body[18:])
	rest := body[26:]
	ksLen := int(rest[0])
	if len(rest) < 1+ksLen+2 {
		return r, fmt.Errorf("%w: keyspace name cut short", ErrMalformed)
	}
	r.Keyspace = string(rest[1 : 1+ksLen])
	rest = rest[1+ksLen:]
	keyLen := int(binary.LittleEndian.Uint16(rest))
	if len(rest) < 2+keyLen || (r.Kind == KindRead && len(rest) != 2+keyLen) {
		return r, fmt.Errorf("%w: key of %d bytes in %d", ErrMalformed, keyLen, len(rest)-2)
	}
	r.Key = string(rest[2 : 2+keyLen])
	if r.Kind == KindFsFetch {
		rest = rest[2+keyLen:]
		if len(rest) < 5 || len(rest) != 5+4*int(rest[4]) {
			return r, fmt.Errorf("%w: credentials of %d bytes", ErrMalformed, len(rest))
		}
		r.UID = binary.LittleEndian.Uint32(rest)
		if n := int(rest[4]); n > 0 {
			r.GIDs = make([]uint32, n)
			for i := range r.GIDs {
				r.GIDs[i] = binary.LittleEndian.Uint32(rest[5+4*i:])
			}
		}
	}
	return r, CheckRead(r)
}

// Header is a response's fixed part.
type Header struct {
	Code      uint8
	Flags     byte
	RingID    uint64
	MembersID uint64
	Size      uint64
	Version   uint64
}

// AppendResponse appends a response's length prefix and header to b, for
// a body of tail more bytes (the data, or the message).
func AppendResponse(b []byte, h Header, tail int) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(HeaderBytes+tail))
	b = append(b, h.Code, h.Flags)
	b = binary.LittleEndian.AppendUint64(b, h.RingID)
	b = binary.LittleEndian.AppendUint64(b, h.MembersID)
	b = binary.LittleEndian.AppendUint64(b, h.Size)
	return binary.LittleEndian.AppendUint64(b, h.Version)
}

// DecodeHeader decodes the length prefix and header of a response (the
// first LenBytes+HeaderBytes bytes) and returns the length of what
// follows: the data, or the error message.
func DecodeHeader(b []byte) (Header, int, error) {
	n := binary.LittleEndian.Uint32(b)
	if n < HeaderBytes || n > ResponseBytesMax {
		return Header{}, 0, fmt.Errorf("%w: response of %d bytes, limits [%d, %d]", ErrMalformed, n, HeaderBytes, ResponseBytesMax)
	}
	b = b[LenBytes:]
	h := Header{Code: b[0], Flags: b[1],
		RingID:    binary.LittleEndian.Uint64(b[2:]),
		MembersID: binary.LittleEndian.Uint64(b[10:]),
		Size:      binary.LittleEndian.Uint64(b[18:]),
		Version:   binary.LittleEndian.Uint64(b[26:])}
	tail := int(n) - HeaderBytes
	if h.Code != 0 && tail > MessageBytesMax {
		return Header{}, 0, fmt.Errorf("%w: error message of %d bytes, limit %d", ErrMalformed, tail, MessageBytesMax)
	}
	return h, tail, nil
}
