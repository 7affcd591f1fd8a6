// Package errs is Nacre's small error vocabulary: a Kind that survives every
// layer and every wire, so that an edge (gRPC, REST, FUSE, PtlRPC) can map an
// error to its own codes with one table instead of matching strings.
//
// The Kind list is append-only: kinds are compared by value across versions.
// Package errs must stay a leaf: it imports nothing of Nacre's and no
// transport, so every layer may use it.
package errs

import (
	"errors"
	"fmt"
)

// Kind classifies an error by what a caller can do about it.
type Kind uint8

// The kinds. Append only.
const (
	Other           Kind = iota // unclassified; treated as internal
	Invalid                     // the request is malformed or out of range; do not retry
	Permission                  // the caller may not do this
	Exist                       // the thing already exists (or an index is taken)
	NotExist                    // the thing does not exist
	NotEmpty                    // a container still has members
	Unavailable                 // a dependency (etcd, a server) cannot be reached; retry later
	Timeout                     // a deadline passed
	Conflict                    // a concurrent change won; retry the whole operation
	Compacted                   // history before a revision is gone; start over from a snapshot
	Unauthenticated             // no or unknown credentials
	Canceled                    // the caller gave up
	Internal                    // a bug or a corrupt record
)

var kindNames = [...]string{
	Other:           "other",
	Invalid:         "invalid",
	Permission:      "permission denied",
	Exist:           "already exists",
	NotExist:        "does not exist",
	NotEmpty:        "not empty",
	Unavailable:     "unavailable",
	Timeout:         "timeout",
	Conflict:        "conflict",
	Compacted:       "compacted",
	Unauthenticated: "unauthenticated",
	Canceled:        "canceled",
	Internal:        "internal",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Error is an error with a Kind. The message is for people; the Kind is for code.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error so errors.Is and errors.As see through.
func (e *Error) Unwrap() error { return e.Err }

// Errorf formats a message (with %w support) and gives it a kind.
func Errorf(kind Kind, format string, args ...any) error {
	return &Error{Kind: kind, Err: fmt.Errorf(format, args...)}
}

// KindOf returns the kind of the outermost *Error in err's chain, Canceled or
// Timeout for bare context errors, and Other otherwise.
func KindOf(err error) Kind {
	if err == nil {
		return Other
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Other
}

// Is reports whether err is of kind k.
func Is(err error, k Kind) bool { return err != nil && KindOf(err) == k }
