package nrs

import "fmt"

// RuleInfo describes one TBF rule of a head, for lctl get_param
// nrs_tbf_rule and the REST API.
type RuleInfo struct {
	// Rule is the rule as it stands, Burst filled in. Rule.String gives
	// its text; for the default rule the match is "*".
	Rule Rule
	// Classes is the number of classes (buckets) the rule has now.
	Classes int
	// Queued is the number of requests waiting in the rule's classes.
	Queued int
	// Dispatched counts the requests released through the rule since it
	// was started.
	Dispatched uint64
}

// Rules returns the head's TBF rules in match order, the default rule
// last. Under fifo the rules are listed with no classes and nothing queued.
func (h *Head) Rules() []RuleInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	var stats map[*rule][2]int
	if h.mu.tbf != nil {
		stats = h.mu.tbf.ruleStats()
	}
	out := make([]RuleInfo, len(h.mu.rules.list))
	for i, r := range h.mu.rules.list {
		s := stats[r]
		out[i] = RuleInfo{Rule: Rule{Name: r.Name, Match: r.Match.clone(), Rate: r.Rate, Burst: r.Burst},
			Classes: s[0], Queued: s[1], Dispatched: r.dispatched}
	}
	return out
}

// AddRule starts rule r, placing it just before the rule named before, or
// after every other rule but the default one if before is "" or "default".
// Queued requests are classified again, so those r now matches first move
// to its classes. It returns an error, changing nothing, wrapping ErrBadRule
// if r.Validate fails, ErrRuleExists if the name is taken (the default
// rule's included), ErrNoRule if before names no rule, or ErrTooManyRules.
func (h *Head) AddRule(r Rule, before string) error {
	if err := r.Validate(); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	rs := &h.mu.rules
	if rs.find(r.Name) >= 0 {
		return ruleErr(ErrRuleExists, r.Name, "already started")
	}
	at, err := h.rankLocked(r.Name, before)
	if err != nil {
		return err
	}
	if len(rs.list) >= MaxRules {
		return ruleErr(ErrTooManyRules, r.Name, "the head has %d rules already, the most it holds", len(rs.list))
	}
	rs.list = append(rs.list[:at], append([]*rule{newRule(r)}, rs.list[at:]...)...)
	h.rulesChangedLocked()
	return nil
}

// rankLocked returns the index a rule goes to when ranked before the rule
// named before ("" and "default": before the default rule).
func (h *Head) rankLocked(name, before string) (int, error) {
	rs := &h.mu.rules
	if before == "" || before == DefaultRuleName {
		return len(rs.list) - 1, nil
	}
	if before == name {
		return 0, ruleErr(ErrBadRule, name, "rank=%s: a rule cannot rank before itself", before)
	}
	at := rs.find(before)
	if at < 0 {
		return 0, ruleErr(ErrNoRule, name, "rank=%s: no such rule", before)
	}
	return at, nil
}

// rulesChangedLocked re-classifies queued requests after rules were added,
// moved or deleted, and wakes a Get if that made one releasable sooner.
func (h *Head) rulesChangedLocked() {
	if h.mu.tbf == nil {
		return
	}
	now := h.clock.Now()
	h.mu.tbf.reclassify(now)
	h.wakeLocked(now)
}

// ChangeRule sets the rate and burst of the named rule (0 leaves a value
// unchanged); the default rule may be changed too. It takes effect at once:
// classes keep their token debt counted in tokens, which they now repay at
// the new rate. It returns an error, changing nothing, wrapping ErrNoRule
// if there is no such rule or ErrBadRule if a value is out of range.
func (h *Head) ChangeRule(name string, rate, burst int) error {
	if rate != 0 {
		if err := checkRate(name, rate); err != nil {
			return err
		}
	}
	if burst != 0 {
		if err := checkBurst(name, burst); err != nil {
			return err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changeLocked(name, rate, burst)
}

func (h *Head) changeLocked(name string, rate, burst int) error {
	i := h.mu.rules.find(name)
	if i < 0 {
		return ruleErr(ErrNoRule, name, "no such rule")
	}
	r := h.mu.rules.list[i]
	old := r.interval
	r.set(rate, burst)
	if h.mu.tbf != nil {
		now := h.clock.Now()
		h.mu.tbf.rescale(r, old, now)
		h.wakeLocked(now)
	}
	return nil
}

// MoveRule moves the named rule just before the rule named before (to the
// end, before the default rule, if before is "" or "default"), as Lustre's
// "change NAME rank=OTHER". Queued requests are classified again. It
// returns an error, changing nothing, wrapping ErrNoRule if either rule is
// missing or ErrBadRule for an attempt to move the default rule or a rule
// before itself.
func (h *Head) MoveRule(name, before string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.checkMoveLocked(name, before); err != nil {
		return err
	}
	h.moveLocked(name, before)
	return nil
}

func (h *Head) checkMoveLocked(name, before string) error {
	if name == DefaultRuleName {
		return ruleErr(ErrBadRule, name, "the default rule is always last and cannot be moved")
	}
	if h.mu.rules.find(name) < 0 {
		return ruleErr(ErrNoRule, name, "no such rule")
	}
	_, err := h.rankLocked(name, before)
	return err
}

// moveLocked moves a rule that checkMoveLocked accepted.
func (h *Head) moveLocked(name, before string) {
	rs := &h.mu.rules
	i := rs.find(name)
	r := rs.list[i]
	rs.list = append(rs.list[:i], rs.list[i+1:]...)
	at, _ := h.rankLocked(name, before)
	rs.list = append(rs.list[:at], append([]*rule{r}, rs.list[at:]...)...)
	h.rulesChangedLocked()
}

// DeleteRule stops the named rule. Its queued requests are classified
// again by the remaining rules, none lost. It returns an error wrapping
// ErrNoRule if there is no such rule, or ErrBadRule for the default rule,
// which cannot be stopped.
func (h *Head) DeleteRule(name string) error {
	if name == DefaultRuleName {
		return ruleErr(ErrBadRule, name, "the default rule cannot be stopped; change its rate instead")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	rs := &h.mu.rules
	i := rs.find(name)
	if i < 0 {
		return ruleErr(ErrNoRule, name, "no such rule")
	}
	rs.list = append(rs.list[:i], rs.list[i+1:]...)
	h.rulesChangedLocked()
	return nil
}

// Apply carries out a command from ParseRule: start calls AddRule, stop
// DeleteRule, and change ChangeRule and then MoveRule for a rank. A change
// is checked whole before any part of it is made, so a failing command
// changes nothing. Errors are those of the methods it calls.
func (h *Head) Apply(cmd RuleCommand) error {
	switch cmd.Op {
	case OpStart:
		return h.AddRule(cmd.Rule, cmd.Rank)
	case OpStop:
		return h.DeleteRule(cmd.Rule.Name)
	case OpChange:
		name := cmd.Rule.Name
		if cmd.Rule.Rate != 0 {
			if err := checkRate(name, cmd.Rule.Rate); err != nil {
				return err
			}
		}
		if cmd.Rule.Burst != 0 {
			if err := checkBurst(name, cmd.Rule.Burst); err != nil {
				return err
			}
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if cmd.Rank != "" {
			if err := h.checkMoveLocked(name, cmd.Rank); err != nil {
				return err
			}
		}
		if err := h.changeLocked(name, cmd.Rule.Rate, cmd.Rule.Burst); err != nil {
			return err
		}
		if cmd.Rank != "" {
			h.moveLocked(name, cmd.Rank)
		}
		return nil
	}
	return ruleErr(ErrBadRule, cmd.Rule.Name, "unknown command %v", cmd.Op)
}

// String returns the rule's line as lctl get_param nrs_tbf_rule would show
// it: name, match, rate, burst and the statistics.
func (ri RuleInfo) String() string {
	return fmt.Sprintf("%s %s rate=%d burst=%d classes=%d queued=%d dispatched=%d",
		ri.Rule.Name, ri.Rule.Match, ri.Rule.Rate, ri.Rule.Burst, ri.Classes, ri.Queued, ri.Dispatched)
}
