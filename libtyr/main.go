// Command libtyr is the Go client built as a C shared library
// (go build -buildmode=c-shared); tyr.h is its API.
//
// C holds no Go pointers: clients, transactions and streams are numbers in
// a table here (handles), and memory handed to C is allocated with malloc.
// Data C passes in is read in place during the call and copied when the
// call keeps it (a transaction's buffered ops), so C may free it on return.
// Every exported call recovers from panics and reports them as TYR_UNKNOWN.
package main

/*
#cgo CFLAGS: -O2
#include <stdlib.h>
#include <string.h>
#define TYR_TYPES_ONLY
#include "tyr.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/tyrstore/tyr/client"
)

func main() {}

// handles maps the numbers C holds to Go values. Numbers are never reused,
// so a stale handle finds nothing rather than another value.
var handles struct {
	sync.Mutex
	next uint64
	m    map[uint64]any
}

func newHandle(v any) uint64 {
	handles.Lock()
	defer handles.Unlock()
	if handles.m == nil {
		handles.m = map[uint64]any{}
	}
	handles.next++
	handles.m[handles.next] = v
	return handles.next
}

// lookup returns the value of handle h if it is a T.
func lookup[T any](h uint64) (T, error) {
	handles.Lock()
	v, ok := handles.m[h]
	handles.Unlock()
	t, isT := v.(T)
	if !ok || !isT {
		var zero T
		return zero, invalid("no %s with handle %d (closed, or never opened)", handleKind(zero), h)
	}
	return t, nil
}

func handleKind(v any) string {
	switch v.(type) {
	case *conn:
		return "client"
	case *txn:
		return "transaction"
	case *reader:
		return "reader"
	case *writer:
		return "writer"
	case *fsys:
		return "file system"
	}
	return "value"
}

// release removes handle h and returns its value if it is a T.
func release[T any](h uint64) (T, error) {
	t, err := lookup[T](h)
	if err == nil {
		handles.Lock()
		delete(handles.m, h)
		handles.Unlock()
	}
	return t, err
}

// codes maps the error classes to tyr.h's codes.
var codes = []struct {
	class error
	code  C.int
}{
	{client.ErrNotFound, C.TYR_NOT_FOUND},
	{client.ErrExists, C.TYR_EXISTS},
	{client.ErrInvalidArgument, C.TYR_INVALID_ARGUMENT},
	{client.ErrOutOfRange, C.TYR_OUT_OF_RANGE},
	{client.ErrTooLarge, C.TYR_TOO_LARGE},
	{client.ErrUnavailable, C.TYR_UNAVAILABLE},
	{client.ErrConflict, C.TYR_CONFLICT},
	{client.ErrCorruption, C.TYR_CORRUPTION},
	{client.ErrNoSpace, C.TYR_NO_SPACE},
}

// codeError is an error that stands for a code of tyr.h: one a transaction
// body returned to tyr_run_tx.
type codeError struct{ code C.int }

func (e codeError) Error() string {
	return fmt.Sprintf("tyr: the transaction's body returned %d (%s)", int(e.code), C.GoString(tyr_code_name(e.code)))
}

// Unwrap gives the class of the code, so RunTx runs a body that returned
// TYR_CONFLICT again.
func (e codeError) Unwrap() error {
	for _, c := range codes {
		if c.code == e.code {
			return c.class
		}
	}
	return nil
}

func codeOf(err error) C.int {
	var ce codeError
	switch {
	case err == nil:
		return C.TYR_OK
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, context.DeadlineExceeded):
		return C.TYR_TIMEOUT
	}
	for _, c := range codes {
		if errors.Is(err, c.class) {
			return c.code
		}
	}
	return C.TYR_UNKNOWN
}

// report fills st (if not NULL) for err and returns its code.
func report(st *C.tyr_status, err error) C.int {
	code := codeOf(err)
	if st == nil {
		return code
	}
	st.code = code
	st.flags = 0
	msg := ""
	if err != nil {
		msg = err.Error()
		if client.Refused(err) {
			st.flags |= C.TYR_FLAG_REFUSED
		}
		if client.Retryable(err) {
			st.flags |= C.TYR_FLAG_RETRYABLE
		}
		if errors.Is(err, client.ErrOutcomeUnknown) {
			st.flags |= C.TYR_FLAG_OUTCOME_UNKNOWN
		}
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&st.message[0])), C.TYR_MESSAGE_BYTES)
	n := copy(buf[:len(buf)-1], msg)
	buf[n] = 0
	return code
}

// call runs f and reports its error, or a panic as TYR_UNKNOWN.
func call(st *C.tyr_status, f func() error) (code C.int) {
	defer func() {
		if r := recover(); r != nil {
			code = report(st, fmt.Errorf("tyr: internal error in libtyr: %v", r))
		}
	}()
	return report(st, f())
}

// invalid is an error of class ErrInvalidArgument about the call itself.
func invalid(format string, args ...any) error {
	return &client.Error{Class: client.ErrInvalidArgument, Message: fmt.Sprintf(format, args...)}
}

// bytesIn is the n bytes of C memory at p, read in place.
func bytesIn(p unsafe.Pointer, n C.size_t) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(p), int(n))
}

// cBytes copies b into memory from malloc; nil for no bytes.
func cBytes(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	p := C.malloc(C.size_t(len(b)))
	copy(unsafe.Slice((*byte)(p), len(b)), b)
	return p
}

func unixNano(t time.Time) C.int64_t {
	if t.IsZero() {
		return 0
	}
	return C.int64_t(t.UnixNano())
}

//export tyr_api_version
func tyr_api_version() C.int { return C.TYR_API_VERSION }

var codeNames = func() map[C.int]*C.char {
	m := map[C.int]*C.char{C.TYR_OK: C.CString("ok"), C.TYR_TIMEOUT: C.CString("timeout"),
		C.TYR_UNKNOWN: C.CString("unknown")}
	for _, c := range codes {
		m[c.code] = C.CString(c.class.Error())
	}
	return m
}()

//export tyr_code_name
func tyr_code_name(code C.int) *C.char {
	if s, ok := codeNames[code]; ok {
		return s
	}
	return codeNames[C.TYR_UNKNOWN]
}

//export tyr_free
func tyr_free(p unsafe.Pointer) { C.free(p) }
