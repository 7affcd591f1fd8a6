package nrs

import "errors"

// Every error this package returns wraps one of these sentinels; test for
// them with errors.Is. The message starts with "nrs:" and goes on to say
// which rule, value or policy was wrong and why, so it can be shown to the
// administrator who typed it as is.
var (
	// ErrClosed is returned by Get once Close has been called.
	ErrClosed = errors.New("nrs: head closed")

	// ErrBadRule reports a rule spec that does not parse, or a rule or
	// rule change whose values are out of range (a rate of 0, a bad name,
	// an attempt to stop or move the default rule).
	ErrBadRule = errors.New("nrs: bad rule")

	// ErrNoRule reports a rule name (to change, stop, or rank before) that
	// the head does not have.
	ErrNoRule = errors.New("nrs: no such rule")

	// ErrRuleExists reports a start of a rule whose name is taken.
	ErrRuleExists = errors.New("nrs: rule exists")

	// ErrTooManyRules reports a start that would take the head past
	// MaxRules rules.
	ErrTooManyRules = errors.New("nrs: too many rules")

	// ErrBadPolicy reports a policy name that is not one of the policies
	// this package implements.
	ErrBadPolicy = errors.New("nrs: unknown policy")

	// ErrBadConfig reports a Config that Validate rejects.
	ErrBadConfig = errors.New("nrs: bad config")
)

// kindError is an error whose message is written in full by the caller
// (`nrs: rule "x": rate 0: must be positive`) and which still matches its
// sentinel with errors.Is, without the sentinel's text in the message.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }
