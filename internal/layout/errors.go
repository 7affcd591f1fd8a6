package layout

import (
	"errors"
	"syscall"

	"github.com/nacrefs/nacre/internal/errs"
)

// Errors of the layout package. Every error it returns wraps exactly one of
// these (test with errors.Is) inside an *errs.Error of the kind noted, with
// what was wrong and where as context.
var (
	// ErrInvalid: a layout or an argument breaks a rule (stripe size not a
	// multiple of 64 KiB, extents that do not tile the file, an I/O range
	// that overflows, a size table of the wrong shape). Kind Invalid; errno
	// EINVAL.
	ErrInvalid = errors.New("layout: invalid")
	// ErrCorrupt: an encoded layout cannot be decoded: bad magic, unknown
	// version or flags, nonzero reserved bytes, a short or long buffer, or
	// a decoded layout that fails Validate. Kind Invalid; errno EPROTO.
	ErrCorrupt = errors.New("layout: corrupt encoding")
	// ErrUninstantiated: the range touches a component that has no objects
	// yet; the client must ask the MDS to instantiate it (a layout intent)
	// and retry. Kind Conflict; errno ENODATA.
	ErrUninstantiated = errors.New("layout: component not instantiated")
	// ErrBeyondLayout: the range reaches past the end of the last
	// component, which does not extend to EOF. Kind Invalid; errno EFBIG.
	ErrBeyondLayout = errors.New("layout: offset beyond the layout")
)

var sentinels = []struct {
	err   error
	kind  errs.Kind
	errno syscall.Errno
}{
	{ErrInvalid, errs.Invalid, syscall.EINVAL},
	{ErrCorrupt, errs.Invalid, syscall.EPROTO},
	{ErrUninstantiated, errs.Conflict, syscall.ENODATA},
	{ErrBeyondLayout, errs.Invalid, syscall.EFBIG},
}

// Errno maps an error of this package to the errno the wire carries. It
// returns 0 for nil and EIO for an error that wraps none of the sentinels.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return s.errno
		}
	}
	return syscall.EIO
}

// fail wraps sentinel with context and the sentinel's kind.
func fail(sentinel error, format string, args ...any) error {
	kind := errs.Other
	for _, s := range sentinels {
		if s.err == sentinel {
			kind = s.kind
		}
	}
	return errs.Errorf(kind, format+": %w", append(args, sentinel)...)
}
