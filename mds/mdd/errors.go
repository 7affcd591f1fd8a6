package mdd

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/nacrefs/nacre/internal/fid"

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
// a message made of format and args.
func fail(errno syscall.Errno, format string, args ...any) error {
	kind, ok := kinds[errno]
	if !ok {
		kind = errs.Other
	}
	return errs.Errorf(kind, "mdd: "+format+": %w", append(args, errno)...)
}

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

// missingName is the ENOENT of a lookup of a name its directory does not
// hold, the commonest error of a metadata server (a create looks its name
// up first, a shell or a compiler searches paths): unlike fail's, its
// message is made only when printed.
type missingName struct {
	parent fid.FID
	name   string
}

func (e *missingName) Error() string {
	return fmt.Sprintf("mdd: lookup %q in %v: %v", clampName(e.name), e.parent, syscall.ENOENT)
}

func (e *missingName) Unwrap() error { return syscall.ENOENT }

func notFound(parent fid.FID, name string) error {
	return &errs.Error{Kind: errs.NotExist, Err: &missingName{parent, name}}
}
