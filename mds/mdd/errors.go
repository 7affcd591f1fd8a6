package mdd

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/nacrefs/nacre/internal/errs"
)

// Every error the Store returns wraps exactly one syscall.Errno — the errno
// Linux (and Lustre's MDT) returns for the same failure — inside an
// *errs.Error whose Kind follows from it (see kinds). Test with
// errors.Is(err, syscall.ENOENT), map to the wire with Errno, or switch on
// errs.KindOf. A failed operation changed nothing.

var kinds = map[syscall.Errno]errs.Kind{
	syscall.ENOENT:       errs.NotExist,
	syscall.ENODATA:      errs.NotExist,
	syscall.ESTALE:       errs.NotExist,
	syscall.EEXIST:       errs.Exist,
	syscall.ENOTEMPTY:    errs.NotEmpty,
	syscall.EACCES:       errs.Permission,
	syscall.EPERM:        errs.Permission,
	syscall.EINVAL:       errs.Invalid,
	syscall.ENAMETOOLONG: errs.Invalid,
	syscall.ENOTDIR:      errs.Invalid,
	syscall.EISDIR:       errs.Invalid,
	syscall.ELOOP:        errs.Invalid,
	syscall.EMLINK:       errs.Invalid,
	syscall.ERANGE:       errs.Invalid,
	syscall.E2BIG:        errs.Invalid,
	syscall.EOPNOTSUPP:   errs.Invalid,
	syscall.EFBIG:        errs.Invalid,
	syscall.EPROTO:       errs.Invalid,
	syscall.EBUSY:        errs.Conflict,
	syscall.ENOSPC:       errs.Unavailable,
	syscall.EIO:          errs.Internal,
}

// Errno returns the errno err carries: 0 for nil, the wrapped
// syscall.Errno, or EIO for an error that carries none (a Pebble failure).
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

// fail returns an error wrapping errno, with the kind that goes with it and
// a message made of format and args, formatted only if printed: most go
// back to a client as an errno and never are, and some are a metadata
// server's commonest answer (ENOENT for the lookup of a missing name,
// which every create makes first).
func fail(errno syscall.Errno, format string, args ...any) error {
	kind, ok := kinds[errno]
	if !ok {
		kind = errs.Other
	}
	return &errs.Error{Kind: kind, Err: &failure{errno: errno, format: format, args: args}}
}

// failure is fail's error.
type failure struct {
	errno  syscall.Errno
	format string
	args   []any
}

func (e *failure) Error() string {
	return "mdd: " + fmt.Sprintf(e.format, e.args...) + ": " + e.errno.Error()
}

func (e *failure) Unwrap() error { return e.errno }

// ioError wraps an error from Pebble (or a record that does not decode) as
// EIO with context.
func ioError(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var e *errs.Error
	if errors.As(err, &e) {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return err // already one of ours
		}
	}
	return errs.Errorf(errs.Internal, "mdd: "+format+": %w (%w)", append(args, err, syscall.EIO)...)
}
