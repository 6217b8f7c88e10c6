package errs

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
)

// classCodes maps each error class to its gRPC status code, one to one, so
// the server encodes with it and the clients decode with it.
var classCodes = []struct {
	class error
	code  codes.Code
}{
	{ErrNotFound, codes.NotFound},
	{ErrExists, codes.AlreadyExists},
	{ErrInvalidArgument, codes.InvalidArgument},
	{ErrOutOfRange, codes.OutOfRange},
	{ErrTooLarge, codes.ResourceExhausted},
	{ErrUnavailable, codes.Unavailable},
	{ErrConflict, codes.Aborted},
	{ErrCorruption, codes.DataLoss},
	{ErrNoSpace, codes.FailedPrecondition},
}

// Code returns the gRPC code for err's class, and whether err has one.
// Context cancellation and deadlines map to their own codes.
func Code(err error) (codes.Code, bool) {
	for _, cc := range classCodes {
		if errors.Is(err, cc.class) {
			return cc.code, true
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return codes.Canceled, true
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded, true
	}
	return codes.Internal, false
}

// Class returns the error class a gRPC code stands for, or nil.
func Class(code codes.Code) error {
	for _, cc := range classCodes {
		if cc.code == code {
			return cc.class
		}
	}
	return nil
}
