// Package rpcstatus is the one table between Nacre's error kinds and gRPC
// status codes, used by every gRPC service and client of the control plane.
package rpcstatus

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nacrefs/nacre/internal/errs"
)

var toCode = map[errs.Kind]codes.Code{
	errs.Other:           codes.Unknown,
	errs.Invalid:         codes.InvalidArgument,
	errs.Permission:      codes.PermissionDenied,
	errs.Exist:           codes.AlreadyExists,
	errs.NotExist:        codes.NotFound,
	errs.NotEmpty:        codes.FailedPrecondition,
	errs.Unavailable:     codes.Unavailable,
	errs.Timeout:         codes.DeadlineExceeded,
	errs.Conflict:        codes.Aborted,
	errs.Compacted:       codes.OutOfRange,
	errs.Unauthenticated: codes.Unauthenticated,
	errs.Canceled:        codes.Canceled,
	errs.Internal:        codes.Internal,
}

var toKind = func() map[codes.Code]errs.Kind {
	m := make(map[codes.Code]errs.Kind, len(toCode))
	for k, c := range toCode {
		m[c] = k
	}
	return m
}()

// Error converts an error to a gRPC status error carrying the message.
// A status error passes through; bare context errors keep their meaning.
func Error(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errs.KindOf(err) != errs.Other:
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(Code(errs.KindOf(err)), err.Error())
}

// Code is the gRPC code of a kind.
func Code(k errs.Kind) codes.Code {
	if c, ok := toCode[k]; ok {
		return c
	}
	return codes.Unknown
}

// Kind is the error kind of a gRPC status error, for clients that branch.
func Kind(err error) errs.Kind {
	if err == nil {
		return errs.Other
	}
	if k, ok := toKind[status.Code(err)]; ok {
		return k
	}
	return errs.Other
}

// FromStatus turns a gRPC error back into a kinded error.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	return errs.Errorf(Kind(err), "%s", status.Convert(err).Message())
}
