package nrs

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

// Limits on rules. Rules arrive from administrators over the network
// (lctl, REST), so every part of one is bounded: the text, the lists in its
// match expression, and the number of rules on a head.
const (
	// MaxSpecLen is the longest rule spec ParseRule accepts, in bytes.
	MaxSpecLen = 4096
	// MaxNameLen is the longest rule name.
	MaxNameLen = 64
	// MaxListLen is the most entries one nid={...}, jobid={...} or
	// opcode={...} list may hold.
	MaxListLen = 64
	// MaxJobIDPatternLen is the longest job id pattern.
	MaxJobIDPatternLen = 128
	// MaxRate is the highest rate a rule may have, in RPCs per second.
	MaxRate = 1_000_000
	// MaxBurst is the deepest bucket a rule may have.
	MaxBurst = 1_000_000
	// MaxRules is the most rules a head holds, the default rule included.
	MaxRules = 128
)

// Defaults of the TBF policy, as Lustre's.
const (
	// DefaultRuleName names the built-in rule that catches every request no
	// other rule matches. It is always last, and cannot be stopped or moved.
	DefaultRuleName = "default"
	// DefaultRate is the initial rate of the default rule (Lustre's
	// NRS_TBF_DEFAULT_RATE).
	DefaultRate = 10000
	// DefaultBurst is the bucket depth of a rule started without burst=
	// (Lustre's fixed TBF depth).
	DefaultBurst = 3
)

// Rule is one TBF rule: the requests its Match selects are put in classes,
// each with its own token bucket of Rate tokens per second holding at most
// Burst tokens. A Rule is a plain value; the Head copies it when it is
// added.
type Rule struct {
	// Name identifies the rule: 1 to MaxNameLen letters, digits, '_', '-'
	// or '.'.
	Name string
	// Match selects the requests of the rule. The zero Match selects
	// every request.
	Match Match
	// Rate is the rate of each of the rule's buckets in RPCs per second,
	// 1 to MaxRate.
	Rate int
	// Burst is the depth of each bucket, 1 to MaxBurst; 0 means
	// DefaultBurst.
	Burst int
}

// Validate returns nil if r may be added to a head, or an error wrapping
// ErrBadRule that says what is wrong with it.
func (r Rule) Validate() error {
	if err := checkName(r.Name); err != nil {
		return err
	}
	if err := checkRate(r.Name, r.Rate); err != nil {
		return err
	}
	if r.Burst != 0 {
		if err := checkBurst(r.Name, r.Burst); err != nil {
			return err
		}
	}
	if reason := r.Match.problem(); reason != "" {
		return ruleErr(ErrBadRule, r.Name, "%s", reason)
	}
	return nil
}

// String returns r in the syntax ParseRule reads, as a start command:
// "start NAME EXPR rate=N" followed by " burst=M" when Burst is set. For a
// valid rule, ParseRule(r.String()) gives back r.
func (r Rule) String() string {
	var b strings.Builder
	b.WriteString("start ")
	b.WriteString(r.Name)
	b.WriteByte(' ')
	b.WriteString(r.Match.String())
	b.WriteString(" rate=")
	b.WriteString(strconv.Itoa(r.Rate))
	if r.Burst != 0 {
		b.WriteString(" burst=")
		b.WriteString(strconv.Itoa(r.Burst))
	}
	return b.String()
}

// Match is a TBF match expression: a conjunction of conditions on a
// request's NID, job id and opcode. A request matches when it satisfies
// every non-empty list, and it satisfies a list when it matches any entry of
// it. The zero Match (written "*") matches every request.
type Match struct {
	// NIDs matches the client's NID (nid={...}).
	NIDs []NIDPattern
	// JobIDs matches the job id, with '*' matching any run of characters
	// (jobid={...}).
	JobIDs []string
	// Opcodes matches the opcode (opcode={...}).
	Opcodes []wire.Opcode
}

// IsZero reports whether m matches every request.
func (m Match) IsZero() bool {
	return len(m.NIDs) == 0 && len(m.JobIDs) == 0 && len(m.Opcodes) == 0
}

// Matches reports whether a request from nid, sent for jobID, asking for op,
// matches m.
func (m Match) Matches(nid lwire.NID, jobID string, op wire.Opcode) bool {
	if len(m.NIDs) > 0 && !slices.ContainsFunc(m.NIDs, func(p NIDPattern) bool { return p.Matches(nid) }) {
		return false
	}
	if len(m.JobIDs) > 0 && !slices.ContainsFunc(m.JobIDs, func(p string) bool { return globMatch(p, jobID) }) {
		return false
	}
	if len(m.Opcodes) > 0 && !slices.Contains(m.Opcodes, op) {
		return false
	}
	return true
}

// String returns m in Lustre's syntax, conditions in the order nid, jobid,
// opcode joined by '&' ("nid={10.0.0.[1-4]@tcp}&opcode={ost_write}"), and
// "*" for the zero Match. Opcodes print as lower-case names when known and
// as numbers otherwise.
func (m Match) String() string {
	if m.IsZero() {
		return "*"
	}
	var parts []string
	if len(m.NIDs) > 0 {
		s := make([]string, len(m.NIDs))
		for i, p := range m.NIDs {
			s[i] = p.String()
		}
		parts = append(parts, "nid={"+strings.Join(s, " ")+"}")
	}
	if len(m.JobIDs) > 0 {
		parts = append(parts, "jobid={"+strings.Join(m.JobIDs, " ")+"}")
	}
	if len(m.Opcodes) > 0 {
		s := make([]string, len(m.Opcodes))
		for i, op := range m.Opcodes {
			s[i] = strings.ToLower(op.String())
		}
		parts = append(parts, "opcode={"+strings.Join(s, " ")+"}")
	}
	return strings.Join(parts, "&")
}

// problem says why m cannot be used in a rule, or returns "".
func (m Match) problem() string {
	switch {
	case len(m.NIDs) > MaxListLen:
		return fmt.Sprintf("nid list of %d entries: at most %d", len(m.NIDs), MaxListLen)
	case len(m.JobIDs) > MaxListLen:
		return fmt.Sprintf("jobid list of %d entries: at most %d", len(m.JobIDs), MaxListLen)
	case len(m.Opcodes) > MaxListLen:
		return fmt.Sprintf("opcode list of %d entries: at most %d", len(m.Opcodes), MaxListLen)
	}
	for _, p := range m.NIDs {
		if p.net == (lwire.Net{}) {
			return "zero NID pattern: build patterns with ParseNIDPattern"
		}
	}
	for _, j := range m.JobIDs {
		if reason := jobIDPatternProblem(j); reason != "" {
			return reason
		}
	}
	return ""
}

// clone returns a copy of m that shares no slices with it.
func (m Match) clone() Match {
	return Match{NIDs: slices.Clone(m.NIDs), JobIDs: slices.Clone(m.JobIDs), Opcodes: slices.Clone(m.Opcodes)}
}

// ParseMatch parses a match expression as written in a start command:
// "*", or conditions nid={...}, jobid={...} and opcode={...}, each at most
// once, joined by '&' or whitespace. Errors wrap ErrBadRule.
func ParseMatch(expr string) (Match, error) {
	p, err := newParser(expr)
	if err != nil {
		return Match{}, err
	}
	var m Match
	var seen condSet
	all := false
	amp := false
	for i, tok := range p.toks {
		switch {
		case tok == "&":
			if i == 0 || amp || all {
				return Match{}, p.errorf("'&' must join two conditions")
			}
			amp = true
		case tok == "*":
			if i != 0 || len(p.toks) != 1 {
				return Match{}, p.errorf("'*' matches every request and cannot be combined")
			}
			all = true
		default:
			if err := p.condition(tok, &m, &seen); err != nil {
				return Match{}, err
			}
			amp = false
		}
	}
	if amp {
		return Match{}, p.errorf("'&' must join two conditions")
	}
	if !all && m.IsZero() {
		return Match{}, p.errorf("empty match expression: want '*' or nid={...}, jobid={...}, opcode={...}")
	}
	return m, nil
}

// NIDPattern matches client NIDs. It is one entry of a nid={...} list:
//
//	192.168.1.5@tcp       one NID (IPv4 or IPv6, as lnet/wire.ParseNID reads)
//	0@lo                  the loopback NID
//	*@tcp1                every NID on net tcp1
//	192.168.1.[1-128]@tcp IPv4 octets given as '*', a number, or a list of
//	10.[0,2-3].*.*@o2ib   numbers and ranges in brackets
//
// The zero NIDPattern matches nothing and is rejected by Rule.Validate;
// build patterns with ParseNIDPattern. NIDPattern is comparable with
// reflect.DeepEqual, not ==.
type NIDPattern struct {
	net   lwire.Net
	any   bool       // every address on net
	addr  netip.Addr // the one address matched, unless any or octet
	octet *[4][]span // the IPv4 octet patterns, or nil
}

// span is an inclusive range of octet values.
type span struct{ lo, hi uint8 }

// ParseNIDPattern parses one entry of a nid={...} list (see NIDPattern).
// Errors wrap ErrBadRule.
func ParseNIDPattern(s string) (NIDPattern, error) {
	p, reason := parseNIDPattern(s)
	if reason != "" {
		return NIDPattern{}, &kindError{ErrBadRule, fmt.Sprintf("nrs: nid %q: %s", s, reason)}
	}
	return p, nil
}

func parseNIDPattern(s string) (NIDPattern, string) {
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return NIDPattern{}, "missing '@net'"
	}
	addr, netName := s[:at], s[at+1:]
	net, err := lwire.ParseNet(netName)
	if err != nil {
		return NIDPattern{}, err.Error()
	}
	if addr == "*" {
		return NIDPattern{net: net, any: true}, ""
	}
	if strings.Contains(addr, ":") || (!strings.ContainsAny(addr, "*[")) {
		nid, err := lwire.ParseNID(s)
		if err != nil {
			return NIDPattern{}, err.Error()
		}
		return NIDPattern{net: nid.Net, addr: nid.Addr}, ""
	}
	if net.Type == lwire.LO {
		return NIDPattern{}, "the only NID on lo is 0@lo"
	}
	parts := strings.Split(addr, ".")
	if len(parts) != 4 {
		return NIDPattern{}, "address pattern " + strconv.Quote(addr) + " is not four dotted IPv4 octets"
	}
	var oct [4][]span
	exact := true
	for i, part := range parts {
		spans, reason := parseOctet(part)
		if reason != "" {
			return NIDPattern{}, "octet " + strconv.Quote(part) + ": " + reason
		}
		oct[i] = spans
		exact = exact && len(spans) == 1 && spans[0].lo == spans[0].hi
	}
	if exact { // "1.2.3.[4]" is the NID 1.2.3.4, and prints so
		a := netip.AddrFrom4([4]byte{oct[0][0].lo, oct[1][0].lo, oct[2][0].lo, oct[3][0].lo})
		return NIDPattern{net: net, addr: a}, ""
	}
	return NIDPattern{net: net, octet: &oct}, ""
}

// parseOctet parses "*", a decimal, or "[a,b-c,...]".
func parseOctet(s string) ([]span, string) {
	if s == "*" {
		return []span{{0, 255}}, ""
	}
	inner, ok := strings.CutPrefix(s, "[")
	if !ok {
		v, ok := parseByte(s)
		if !ok {
			return nil, "want '*', a number from 0 to 255, or a [list]"
		}
		return []span{{v, v}}, ""
	}
	inner, ok = strings.CutSuffix(inner, "]")
	if !ok {
		return nil, "unclosed '['"
	}
	items := strings.Split(inner, ",")
	if len(items) > 256 {
		return nil, "too many ranges"
	}
	spans := make([]span, 0, len(items))
	for _, item := range items {
		lo, hi, isRange := strings.Cut(item, "-")
		a, ok := parseByte(lo)
		b := a
		if ok && isRange {
			b, ok = parseByte(hi)
		}
		if !ok {
			return nil, "range " + strconv.Quote(item) + " is not n or n-m with numbers from 0 to 255"
		}
		if a > b {
			return nil, "range " + strconv.Quote(item) + " is backwards"
		}
		spans = append(spans, span{a, b})
	}
	return spans, ""
}

// parseByte parses 1 to 3 decimal digits worth at most 255.
func parseByte(s string) (uint8, bool) {
	if s == "" || len(s) > 3 {
		return 0, false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		v = v*10 + int(s[i]-'0')
	}
	if v > 255 {
		return 0, false
	}
	return uint8(v), true
}

// Matches reports whether nid matches p.
func (p NIDPattern) Matches(nid lwire.NID) bool {
	if nid.Net != p.net || p.net == (lwire.Net{}) {
		return false
	}
	switch {
	case p.any:
		return true
	case p.octet != nil:
		if !nid.Addr.Is4() {
			return false
		}
		a := nid.Addr.As4()
		for i, spans := range p.octet {
			if !slices.ContainsFunc(spans, func(s span) bool { return s.lo <= a[i] && a[i] <= s.hi }) {
				return false
			}
		}
		return true
	}
	return nid.Addr == p.addr
}

// String returns p as ParseNIDPattern reads it: "192.168.1.5@tcp",
// "*@tcp1", "10.0.[1-4,9].*@o2ib". The zero NIDPattern prints "<?>".
func (p NIDPattern) String() string {
	switch {
	case p.net == (lwire.Net{}):
		return "<?>"
	case p.any:
		return "*@" + p.net.String()
	case p.octet == nil:
		return lwire.NID{Net: p.net, Addr: p.addr}.String()
	}
	var b strings.Builder
	for i, spans := range p.octet {
		if i > 0 {
			b.WriteByte('.')
		}
		switch {
		case len(spans) == 1 && spans[0] == span{0, 255}:
			b.WriteByte('*')
		case len(spans) == 1 && spans[0].lo == spans[0].hi:
			b.WriteString(strconv.Itoa(int(spans[0].lo)))
		default:
			b.WriteByte('[')
			for j, s := range spans {
				if j > 0 {
					b.WriteByte(',')
				}
				b.WriteString(strconv.Itoa(int(s.lo)))
				if s.hi != s.lo {
					b.WriteByte('-')
					b.WriteString(strconv.Itoa(int(s.hi)))
				}
			}
			b.WriteByte(']')
		}
	}
	b.WriteByte('@')
	b.WriteString(p.net.String())
	return b.String()
}

// globMatch reports whether s matches pattern, in which '*' matches any run
// of characters (including none) and every other byte itself. It runs in
// O(len(pattern)*len(s)) time at worst.
func globMatch(pattern, s string) bool {
	px, sx := 0, 0
	star, restart := -1, 0
	for sx < len(s) {
		switch {
		case px < len(pattern) && pattern[px] == '*':
			star, restart = px, sx
			px++
		case px < len(pattern) && pattern[px] == s[sx]:
			px++
			sx++
		case star >= 0:
			restart++
			px, sx = star+1, restart
		default:
			return false
		}
	}
	for px < len(pattern) && pattern[px] == '*' {
		px++
	}
	return px == len(pattern)
}

// jobIDPatternProblem says why j is not a job id pattern, or returns "".
func jobIDPatternProblem(j string) string {
	if j == "" {
		return "empty job id pattern"
	}
	if len(j) > MaxJobIDPatternLen {
		return fmt.Sprintf("job id pattern of %d bytes: at most %d", len(j), MaxJobIDPatternLen)
	}
	for i := 0; i < len(j); i++ {
		if c := j[i]; c <= ' ' || c > '~' || c == '{' || c == '}' {
			return "job id pattern " + strconv.Quote(j) + " has a space, brace or non-printable character"
		}
	}
	return ""
}

// opcodeByName maps lower-case opcode names ("ost_write") to opcodes. The
// names come from wire.Opcode.String, so this package never lists them
// twice; Lustre's opcodes all lie below 4096.
var opcodeByName = sync.OnceValue(func() map[string]wire.Opcode {
	m := make(map[string]wire.Opcode)
	for op := range wire.Opcode(4096) {
		if op.Known() {
			m[strings.ToLower(op.String())] = op
		}
	}
	return m
})

// parseOpcode parses an opcode name (any case) or decimal number.
func parseOpcode(s string) (wire.Opcode, bool) {
	if s != "" && s[0] >= '0' && s[0] <= '9' {
		v, err := strconv.ParseUint(s, 10, 32)
		return wire.Opcode(v), err == nil
	}
	op, ok := opcodeByName()[strings.ToLower(s)]
	return op, ok
}

// RuleOp is the verb of a RuleCommand.
type RuleOp uint8

// The rule commands of Lustre's nrs_tbf_rule parameter.
const (
	// OpStart adds a rule ("start NAME EXPR rate=N [burst=M] [rank=OTHER]").
	OpStart RuleOp = iota + 1
	// OpChange changes a rule's rate, burst or position
	// ("change NAME [rate=N] [burst=M] [rank=OTHER]").
	OpChange
	// OpStop deletes a rule ("stop NAME").
	OpStop
)

// String returns "start", "change" or "stop".
func (o RuleOp) String() string {
	switch o {
	case OpStart:
		return "start"
	case OpChange:
		return "change"
	case OpStop:
		return "stop"
	}
	return "RuleOp(" + strconv.Itoa(int(o)) + ")"
}

// RuleCommand is one parsed nrs_tbf_rule command, applied to a head with
// Head.Apply.
type RuleCommand struct {
	Op RuleOp
	// Rule is the rule to start (every field set but perhaps Burst), or
	// for change and stop the rule's Name and, for change, the new Rate
	// and Burst (0 means unchanged).
	Rule Rule
	// Rank, for start and change, names the rule before which the rule
	// goes (Lustre's rank=); "" leaves it at the end (start) or where it
	// is (change).
	Rank string
}

// String returns c in the syntax ParseRule reads; ParseRule(c.String())
// gives back c for every c ParseRule returns.
func (c RuleCommand) String() string {
	var b strings.Builder
	switch c.Op {
	case OpStart:
		b.WriteString(c.Rule.String())
	default:
		b.WriteString(c.Op.String())
		b.WriteByte(' ')
		b.WriteString(c.Rule.Name)
		if c.Rule.Rate != 0 {
			b.WriteString(" rate=")
			b.WriteString(strconv.Itoa(c.Rule.Rate))
		}
		if c.Rule.Burst != 0 {
			b.WriteString(" burst=")
			b.WriteString(strconv.Itoa(c.Rule.Burst))
		}
	}
	if c.Rank != "" {
		b.WriteString(" rank=")
		b.WriteString(c.Rank)
	}
	return b.String()
}

// ParseRule parses the value of Lustre's nrs_tbf_rule parameter, as in
// lctl set_param ost.OSS.ost_io.nrs_tbf_rule="start dd jobid={dd.*} rate=100":
//
//	start NAME EXPR rate=N [burst=M] [rank=OTHER]
//	change NAME [rate=N] [burst=M] [rank=OTHER]   (at least one of them)
//	stop NAME
//
// EXPR is a match expression as ParseMatch reads it: "*" or conditions
// nid={...}, jobid={...}, opcode={...} joined by '&' or spaces. List entries
// are separated by spaces. Commands and keys are case-insensitive; names
// are case-sensitive. ParseRule checks syntax and ranges only; whether the
// names exist is for Head.Apply. Errors wrap ErrBadRule and name the rule:
// `nrs: rule "x": rate 0: must be positive`.
//
// ParseRule is a pure function, safe for concurrent use, and bounded in
// time and memory by MaxSpecLen.
func ParseRule(spec string) (RuleCommand, error) {
	p, err := newParser(spec)
	if err != nil {
		return RuleCommand{}, err
	}
	if len(p.toks) == 0 {
		return RuleCommand{}, p.errorf("empty rule command: want start, change or stop")
	}
	var c RuleCommand
	switch strings.ToLower(p.toks[0]) {
	case "start":
		c.Op = OpStart
	case "change":
		c.Op = OpChange
	case "stop":
		c.Op = OpStop
	default:
		return RuleCommand{}, p.errorf("unknown command %q: want start, change or stop", p.toks[0])
	}
	if len(p.toks) < 2 {
		return RuleCommand{}, p.errorf("%s: missing rule name", c.Op)
	}
	name := p.toks[1]
	if err := checkName(name); err != nil {
		return RuleCommand{}, err
	}
	c.Rule.Name = name
	p.name = name
	args := p.toks[2:]
	if c.Op == OpStop {
		if len(args) > 0 {
			return RuleCommand{}, p.errorf("stop takes no arguments, have %q", args[0])
		}
		return c, nil
	}
	var seen condSet
	var haveRate, haveBurst, all, amp, cond bool
	for i, tok := range args {
		if tok == "&" {
			if c.Op != OpStart || amp || i == 0 || !isCondition(args[i-1]) {
				return RuleCommand{}, p.errorf("'&' must join two conditions")
			}
			amp = true
			continue
		}
		if tok == "*" && c.Op == OpStart {
			if all || cond || amp {
				return RuleCommand{}, p.errorf("'*' matches every request and cannot be combined")
			}
			all = true
			continue
		}
		key, val, ok := strings.Cut(tok, "=")
		if !ok {
			return RuleCommand{}, p.errorf("unexpected %q: want key=value", tok)
		}
		key = strings.ToLower(key)
		switch key {
		case "nid", "jobid", "opcode":
			if c.Op != OpStart {
				return RuleCommand{}, p.errorf("%s: cannot change a rule's match expression; stop it and start a new one", c.Op)
			}
			if all {
				return RuleCommand{}, p.errorf("'*' matches every request and cannot be combined")
			}
			if cond && !amp && i > 0 && args[i-1] != "&" && !isCondition(args[i-1]) {
				return RuleCommand{}, p.errorf("conditions must be next to each other, joined by '&' or spaces")
			}
			if err := p.condition(tok, &c.Rule.Match, &seen); err != nil {
				return RuleCommand{}, err
			}
			cond, amp = true, false
			continue
		}
		if amp {
			return RuleCommand{}, p.errorf("'&' must join two conditions")
		}
		switch key {
		case "rate", "burst", "depth", "rank":
		default:
			return RuleCommand{}, p.errorf("unknown key %q: want nid, jobid, opcode, rate, burst or rank", key)
		}
		if strings.ContainsAny(val, "{}") {
			return RuleCommand{}, p.errorf("%s=%s: braces are for nid, jobid and opcode lists", key, val)
		}
		switch key {
		case "rate":
			if haveRate {
				return RuleCommand{}, p.errorf("rate given twice")
			}
			n, err := p.number("rate", val)
			if err != nil {
				return RuleCommand{}, err
			}
			if err := checkRate(name, n); err != nil {
				return RuleCommand{}, err
			}
			c.Rule.Rate, haveRate = n, true
		case "burst", "depth":
			if haveBurst {
				return RuleCommand{}, p.errorf("burst given twice")
			}
			n, err := p.number("burst", val)
			if err != nil {
				return RuleCommand{}, err
			}
			if err := checkBurst(name, n); err != nil {
				return RuleCommand{}, err
			}
			c.Rule.Burst, haveBurst = n, true
		case "rank":
			if c.Rank != "" {
				return RuleCommand{}, p.errorf("rank given twice")
			}
			if err := checkName(val); err != nil {
				return RuleCommand{}, p.errorf("rank=%s: not a rule name", val)
			}
			if val == name {
				return RuleCommand{}, p.errorf("rank=%s: a rule cannot rank before itself", val)
			}
			c.Rank = val
		}
	}
	if amp {
		return RuleCommand{}, p.errorf("'&' must join two conditions")
	}
	switch c.Op {
	case OpStart:
		if !all && !cond {
			return RuleCommand{}, p.errorf("start: missing match expression: want '*' or nid={...}, jobid={...}, opcode={...}")
		}
		if !haveRate {
			return RuleCommand{}, p.errorf("start: missing rate=N")
		}
	case OpChange:
		if !haveRate && !haveBurst && c.Rank == "" {
			return RuleCommand{}, p.errorf("change: nothing to change: want rate=N, burst=M or rank=OTHER")
		}
	}
	return c, nil
}

// isCondition reports whether tok is a nid, jobid or opcode condition.
func isCondition(tok string) bool {
	key, _, ok := strings.Cut(tok, "=")
	if !ok {
		return false
	}
	switch strings.ToLower(key) {
	case "nid", "jobid", "opcode":
		return true
	}
	return false
}

// condSet records which condition keys an expression has used.
type condSet struct{ nid, jobid, opcode bool }

// parser holds a tokenized rule spec or match expression.
type parser struct {
	spec string   // the input, for error messages
	name string   // the rule's name once known, for error messages
	toks []string // words, with brace lists kept whole, and "&"
}

// newParser checks spec's length and characters and splits it into
// tokens: runs of characters separated by whitespace or '&', where a
// {...} list counts as part of its word whatever it contains.
func newParser(spec string) (*parser, error) {
	p := &parser{spec: spec}
	if len(spec) > MaxSpecLen {
		return nil, p.errorf("%d bytes: at most %d", len(spec), MaxSpecLen)
	}
	for i := 0; i < len(spec); i++ {
		if c := spec[i]; (c < ' ' || c > '~') && !isSpace(c) {
			return nil, p.errorf("byte %#02x at offset %d: only printable ASCII is allowed", c, i)
		}
	}
	for i := 0; i < len(spec); {
		c := spec[i]
		switch {
		case isSpace(c):
			i++
			continue
		case c == '&':
			p.toks = append(p.toks, "&")
			i++
			continue
		}
		start := i
		for i < len(spec) && !isSpace(spec[i]) && spec[i] != '&' {
			switch spec[i] {
			case '{':
				end := strings.IndexByte(spec[i+1:], '}')
				if end < 0 {
					return nil, p.errorf("unclosed '{' at offset %d", i)
				}
				if strings.IndexByte(spec[i+1:i+1+end], '{') >= 0 {
					return nil, p.errorf("nested '{' after offset %d", i)
				}
				i += end + 2
			case '}':
				return nil, p.errorf("unmatched '}' at offset %d", i)
			default:
				i++
			}
		}
		p.toks = append(p.toks, spec[start:i])
	}
	return p, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// errorf returns an error wrapping ErrBadRule that names the rule when its
// name is known and quotes (a prefix of) the spec otherwise.
func (p *parser) errorf(format string, args ...any) error {
	return ruleErr(ErrBadRule, p.name, format, args...)
}

// ruleErr formats `nrs: rule "NAME": ...`, or `nrs: rule: ...` when name is
// empty, as an error wrapping kind.
func ruleErr(kind error, name, format string, args ...any) error {
	prefix := "nrs: rule: "
	if name != "" {
		prefix = "nrs: rule " + strconv.Quote(name) + ": "
	}
	return &kindError{kind, prefix + fmt.Sprintf(format, args...)}
}

// condition parses one "key={list}" condition into m.
func (p *parser) condition(tok string, m *Match, seen *condSet) error {
	key, val, ok := strings.Cut(tok, "=")
	if !ok {
		return p.errorf("unexpected %q: want nid={...}, jobid={...} or opcode={...}", tok)
	}
	key = strings.ToLower(key)
	if key != "nid" && key != "jobid" && key != "opcode" {
		return p.errorf("unknown key %q: want nid, jobid or opcode", key)
	}
	if len(val) < 2 || val[0] != '{' || strings.IndexByte(val, '}') != len(val)-1 {
		return p.errorf("%s: want %s={entry ...}, have %q", key, key, tok)
	}
	items := strings.Fields(val[1 : len(val)-1])
	if len(items) == 0 {
		return p.errorf("%s: empty list", key)
	}
	if len(items) > MaxListLen {
		return p.errorf("%s: %d entries: at most %d", key, len(items), MaxListLen)
	}
	var dup bool
	switch key {
	case "nid":
		dup, seen.nid = seen.nid, true
		if !dup {
			for _, it := range items {
				pat, reason := parseNIDPattern(it)
				if reason != "" {
					return p.errorf("nid %q: %s", it, reason)
				}
				m.NIDs = append(m.NIDs, pat)
			}
		}
	case "jobid":
		dup, seen.jobid = seen.jobid, true
		if !dup {
			for _, it := range items {
				if reason := jobIDPatternProblem(it); reason != "" {
					return p.errorf("jobid: %s", reason)
				}
				m.JobIDs = append(m.JobIDs, it)
			}
		}
	case "opcode":
		dup, seen.opcode = seen.opcode, true
		if !dup {
			for _, it := range items {
				op, ok := parseOpcode(it)
				if !ok {
					return p.errorf("opcode %q: want a name such as ost_write or a number up to 4294967295", it)
				}
				m.Opcodes = append(m.Opcodes, op)
			}
		}
	}
	if dup {
		return p.errorf("%s given twice: put every entry in one list", key)
	}
	return nil
}

// number parses a decimal rate or burst.
func (p *parser) number(key, val string) (int, error) {
	if val == "" || len(val) > 10 || strings.TrimLeft(val, "0123456789") != "" {
		return 0, p.errorf("%s=%s: not a decimal number", key, val)
	}
	n, err := strconv.Atoi(val)
	if err != nil {
		return 0, p.errorf("%s=%s: not a decimal number", key, val)
	}
	return n, nil
}

// checkName returns an error unless name is a valid rule name.
func checkName(name string) error {
	if name == "" {
		return ruleErr(ErrBadRule, "", "missing rule name")
	}
	if len(name) > MaxNameLen {
		return ruleErr(ErrBadRule, "", "name of %d bytes: at most %d", len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return ruleErr(ErrBadRule, "", "name %q: use letters, digits, '_', '-' and '.'", name)
		}
	}
	return nil
}

func checkRate(name string, rate int) error {
	switch {
	case rate <= 0:
		return ruleErr(ErrBadRule, name, "rate %d: must be positive", rate)
	case rate > MaxRate:
		return ruleErr(ErrBadRule, name, "rate %d: at most %d", rate, MaxRate)
	}
	return nil
}

func checkBurst(name string, burst int) error {
	switch {
	case burst <= 0:
		return ruleErr(ErrBadRule, name, "burst %d: must be at least 1", burst)
	case burst > MaxBurst:
		return ruleErr(ErrBadRule, name, "burst %d: at most %d", burst, MaxBurst)
	}
	return nil
}
