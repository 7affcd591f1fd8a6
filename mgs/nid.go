package mgs

import (
	"path"

	"github.com/nacrefs/nacre/internal/errs"
	"github.com/nacrefs/nacre/lnet/wire"
)

// ValidateNID checks that s is an LNet NID such as 192.168.1.5@tcp.
func ValidateNID(s string) error {
	if _, err := wire.ParseNID(s); err != nil {
		return errs.Errorf(errs.Invalid, "bad NID %q (want address@net, e.g. 192.168.1.5@tcp): %w", s, err)
	}
	return nil
}

// globMatch matches a name against a path.Match glob; a malformed pattern
// (already refused by the callers' checks) matches nothing.
func globMatch(pattern, name string) bool {
	ok, err := path.Match(pattern, name)
	return ok && err == nil
}
