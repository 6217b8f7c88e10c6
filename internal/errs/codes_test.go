package errs

// The class <-> gRPC code table must be one to one, or an error would change
// class crossing the wire. Run: go test ./internal/errs

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
)

func TestClassCodeRoundTrip(t *testing.T) {
	seen := map[codes.Code]bool{}
	for _, cc := range classCodes {
		wrapped := fmt.Errorf("blob %q: %w", "k", cc.class)
		code, ok := Code(wrapped)
		if !ok || code != cc.code {
			t.Errorf("Code(%v) = %v, %v; want %v", wrapped, code, ok, cc.code)
		}
		if seen[code] {
			t.Errorf("code %v used by two classes", code)
		}
		seen[code] = true
		if got := Class(code); got != cc.class {
			t.Errorf("Class(%v) = %v, want %v", code, got, cc.class)
		}
	}
	if code, ok := Code(fmt.Errorf("x: %w", context.DeadlineExceeded)); !ok || code != codes.DeadlineExceeded {
		t.Errorf("deadline maps to %v, %v", code, ok)
	}
	if code, ok := Code(fmt.Errorf("plain")); ok || code != codes.Internal {
		t.Errorf("an unclassified error maps to %v, %v; want Internal, false", code, ok)
	}
	if Class(codes.Unknown) != nil {
		t.Error("Unknown has a class")
	}
}
