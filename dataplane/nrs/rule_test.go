package nrs

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

func TestParseRuleGood(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want string // ParseRule(spec).String()
	}{
		{"start login nid={192.168.1.[1-128]@tcp 0@lo} rate=100", "start login nid={192.168.1.[1-128]@tcp 0@lo} rate=100"},
		{"start dd jobid={dd.0 iozone.*} rate=50", "start dd jobid={dd.0 iozone.*} rate=50"},
		{"start rw opcode={ost_read OST_WRITE 16} rate=10 burst=1", "start rw opcode={ost_read ost_write ost_sync} rate=10 burst=1"},
		{"start ddw jobid={dd.*}&opcode={ost_write} rate=5", "start ddw jobid={dd.*}&opcode={ost_write} rate=5"},
		{"start x jobid={dd.*} opcode={ost_write} rate=5 burst=4 rank=dd", "start x jobid={dd.*}&opcode={ost_write} rate=5 burst=4 rank=dd"},
		{"start x opcode={ost_write} & nid={*@tcp1} rate=5", "start x nid={*@tcp1}&opcode={ost_write} rate=5"},
		{"  START  x\tNID={ 10.0.0.1@tcp0   10.[1,3-4].*.[7]@o2ib }\n rate=7  ", "start x nid={10.0.0.1@tcp 10.[1,3-4].*.7@o2ib} rate=7"},
		{"start x nid={1.2.3.[4]@tcp [fd00::1]@tcp fd00::2@o2ib *.*.*.*@tcp} rate=1", "start x nid={1.2.3.4@tcp [fd00::1]@tcp [fd00::2]@o2ib *.*.*.*@tcp} rate=1"},
		{"start x nid={1.2.3.[0-255]@tcp} rate=1", "start x nid={1.2.3.*@tcp} rate=1"},
		{"start all * rate=1000", "start all * rate=1000"},
		{"start x opcode={9999} rate=1", "start x opcode={9999} rate=1"},
		{"start x jobid={a=b&c} rate=1", "start x jobid={a=b&c} rate=1"},
		{"change dd rate=200", "change dd rate=200"},
		{"change default rate=5000 burst=8", "change default rate=5000 burst=8"},
		{"change dd rank=login", "change dd rank=login"},
		{"change dd depth=2", "change dd burst=2"},
		{"stop dd", "stop dd"},
		{"stop dd\n", "stop dd"},
	} {
		cmd, err := ParseRule(tc.spec)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", tc.spec, err)
			continue
		}
		if got := cmd.String(); got != tc.want {
			t.Errorf("ParseRule(%q).String() = %q, want %q", tc.spec, got, tc.want)
		}
	}
}

func TestParseRuleFields(t *testing.T) {
	cmd, err := ParseRule("start ddw nid={10.0.0.[1-2]@tcp} jobid={dd.*}&opcode={ost_write 3} rate=5 burst=2 rank=x")
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Op != OpStart || cmd.Rank != "x" || cmd.Rule.Name != "ddw" || cmd.Rule.Rate != 5 || cmd.Rule.Burst != 2 {
		t.Errorf("command %+v", cmd)
	}
	m := cmd.Rule.Match
	if !reflect.DeepEqual(m.JobIDs, []string{"dd.*"}) || !reflect.DeepEqual(m.Opcodes, []wire.Opcode{wire.OSTWrite, wire.OSTRead}) || len(m.NIDs) != 1 {
		t.Errorf("match %#v", m)
	}
	for _, tc := range []struct {
		nid   string
		job   string
		op    wire.Opcode
		match bool
	}{
		{"10.0.0.1@tcp", "dd.1", wire.OSTWrite, true},
		{"10.0.0.2@tcp", "dd.", wire.OSTRead, true},
		{"10.0.0.3@tcp", "dd.1", wire.OSTWrite, false},
		{"10.0.0.1@tcp", "xdd.1", wire.OSTWrite, false},
		{"10.0.0.1@tcp", "dd.1", wire.OSTSync, false},
		{"10.0.0.1@tcp2", "dd.1", wire.OSTWrite, false},
	} {
		if got := m.Matches(lwire.MustParseNID(tc.nid), tc.job, tc.op); got != tc.match {
			t.Errorf("Matches(%s, %s, %v) = %v", tc.nid, tc.job, tc.op, got)
		}
	}
}

func TestParseRuleBad(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want string // in the error message
	}{
		{"", "empty rule command"},
		{"begin x", `unknown command "begin"`},
		{"start", "missing rule name"},
		{"start x", `rule "x": start: missing match expression`},
		{"start x nid={1.2.3.4@tcp}", `rule "x": start: missing rate=N`},
		{"start x nid={1.2.3.4@tcp} rate=0", `nrs: rule "x": rate 0: must be positive`},
		{"start x nid={1.2.3.4@tcp} rate=-1", "rate=-1: not a decimal"},
		{"start x nid={1.2.3.4@tcp} rate=1e3", "rate=1e3: not a decimal"},
		{"start x nid={1.2.3.4@tcp} rate=99999999999", "rate=99999999999: not a decimal"},
		{"start x nid={1.2.3.4@tcp} rate=1000001", "rate 1000001: at most"},
		{"start x nid={1.2.3.4@tcp} rate=1 burst=0", "burst 0: must be at least 1"},
		{"start x nid={1.2.3.4@tcp} rate=1 rate=2", "rate given twice"},
		{"start x nid={1.2.3.4@tcp} rate=1 rank=x", "cannot rank before itself"},
		{"start x nid={1.2.3.4@tcp} rate=1 rank=a/b", "not a rule name"},
		{"start x nid={1.2.3.4@tcp} rate={1}", "braces are for"},
		{"start x nid={1.2.3.4@tcp} rate=1 color=red", `unknown key "color"`},
		{"start x uid={0} rate=1", `unknown key "uid"`},
		{"start x nid={} rate=1", "nid: empty list"},
		{"start x nid={1.2.3.4@tcp rate=1", "unclosed '{'"},
		{"start x nid=1.2.3.4@tcp} rate=1", "unmatched '}'"},
		{"start x nid={a{b}} rate=1", "nested '{'"},
		{"start x nid=1.2.3.4@tcp rate=1", "want nid={entry ...}"},
		{"start x nid={a}{b} rate=1", "want nid={entry ...}"},
		{"start x nid={1.2.3.4@tcp} nid={1.2.3.5@tcp} rate=1", "nid given twice"},
		{"start x nid={1.2.3.4} rate=1", "missing '@net'"},
		{"start x nid={1.2.3.4@eth} rate=1", "unknown net type"},
		{"start x nid={1.2.3.256@tcp} rate=1", "not an IPv4 or IPv6 address"},
		{"start x nid={1.2.3.[9-4]@tcp} rate=1", "backwards"},
		{"start x nid={1.2.3.[1-300]@tcp} rate=1", "numbers from 0 to 255"},
		{"start x nid={1.2.[3@tcp} rate=1", "four dotted"},
		{"start x nid={1.2.3.[4@tcp} rate=1", "unclosed '['"},
		{"start x nid={1.2.3.[1-4/2]@tcp} rate=1", "numbers from 0 to 255"},
		{"start x nid={*@lo} rate=1", ""}, // every NID on lo: fine
		{"start x nid={1@lo} rate=1", "the only NID on lo"},
		{"start x opcode={ost_frobnicate} rate=1", `opcode "ost_frobnicate"`},
		{"start x opcode={4294967296} rate=1", `opcode "4294967296"`},
		{"start x jobid={dd.\x01} rate=1", "printable ASCII"},
		{"start x jobid={" + strings.Repeat("j", MaxJobIDPatternLen+1) + "} rate=1", "job id pattern of 129 bytes"},
		{"start x nid={1.2.3.4@tcp}& rate=1", "'&' must join two conditions"},
		{"start x & nid={1.2.3.4@tcp} rate=1", "'&' must join two conditions"},
		{"start x nid={1.2.3.4@tcp} rate=1 & jobid={x}", "'&' must join two conditions"},
		{"start x nid={1.2.3.4@tcp} rate=1 jobid={x}", "next to each other"},
		{"start x * nid={1.2.3.4@tcp} rate=1", "cannot be combined"},
		{"start x * * rate=1", "cannot be combined"},
		{"start bad/name jobid={x} rate=1", `name "bad/name"`},
		{"start " + strings.Repeat("n", MaxNameLen+1) + " * rate=1", "name of 65 bytes"},
		{"change x", "nothing to change"},
		{"change x rate=0", "rate 0: must be positive"},
		{"change x nid={1.2.3.4@tcp}", "cannot change a rule's match"},
		{"change x *", `unexpected "*"`},
		{"stop x now", "stop takes no arguments"},
		{strings.Repeat(" ", MaxSpecLen+1), "at most 4096"},
	} {
		_, err := ParseRule(tc.spec)
		if tc.want == "" {
			if err != nil {
				t.Errorf("ParseRule(%q): %v", tc.spec, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("ParseRule(%q) succeeded, want error with %q", tc.spec, tc.want)
			continue
		}
		if !errors.Is(err, ErrBadRule) || !strings.HasPrefix(err.Error(), "nrs: rule") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRule(%q) = %v, want ErrBadRule with %q", tc.spec, err, tc.want)
		}
	}
}

func TestParseMatch(t *testing.T) {
	for _, tc := range []struct {
		expr, want, err string
	}{
		{"*", "*", ""},
		{"nid={*@tcp}&jobid={a*}", "nid={*@tcp}&jobid={a*}", ""},
		{"opcode={ldlm_enqueue} jobid={x}", "jobid={x}&opcode={ldlm_enqueue}", ""},
		{"", "", "empty match expression"},
		{"* & *", "", "cannot be combined"},
		{"*&nid={*@tcp}", "", "cannot be combined"},
		{"nid={*@tcp}&", "", "'&' must join"},
		{"&nid={*@tcp}", "", "'&' must join"},
		{"nid={*@tcp} *", "", "cannot be combined"},
		{"rate=5", "", `unknown key "rate"`},
	} {
		m, err := ParseMatch(tc.expr)
		switch {
		case tc.err != "" && (err == nil || !errors.Is(err, ErrBadRule) || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseMatch(%q) = %v, want error with %q", tc.expr, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("ParseMatch(%q): %v", tc.expr, err)
		case tc.err == "" && m.String() != tc.want:
			t.Errorf("ParseMatch(%q).String() = %q, want %q", tc.expr, m.String(), tc.want)
		}
	}
}

func TestNIDPattern(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		yes, no []string
	}{
		{"192.168.1.5@tcp", []string{"192.168.1.5@tcp", "192.168.1.5@tcp0"}, []string{"192.168.1.6@tcp", "192.168.1.5@tcp1", "192.168.1.5@o2ib"}},
		{"*@tcp", []string{"1.2.3.4@tcp", "[fd00::1]@tcp"}, []string{"1.2.3.4@tcp1", "0@lo"}},
		{"0@lo", []string{"0@lo"}, []string{"127.0.0.1@tcp"}},
		{"*@lo", []string{"0@lo"}, []string{"127.0.0.1@tcp"}},
		{"192.168.1.[1-128]@tcp", []string{"192.168.1.1@tcp", "192.168.1.128@tcp"}, []string{"192.168.1.0@tcp", "192.168.1.129@tcp", "192.168.2.5@tcp", "[fd00::1]@tcp"}},
		{"10.[0,2-3].*.1@o2ib2", []string{"10.0.9.1@o2ib2", "10.3.255.1@o2ib2"}, []string{"10.1.9.1@o2ib2", "10.0.9.2@o2ib2", "10.0.9.1@o2ib"}},
		{"[fd00::1]@tcp", []string{"fd00::1@tcp"}, []string{"fd00::2@tcp"}},
	} {
		p, err := ParseNIDPattern(tc.pattern)
		if err != nil {
			t.Errorf("ParseNIDPattern(%q): %v", tc.pattern, err)
			continue
		}
		for _, s := range tc.yes {
			if !p.Matches(lwire.MustParseNID(s)) {
				t.Errorf("%s does not match %s", tc.pattern, s)
			}
		}
		for _, s := range tc.no {
			if p.Matches(lwire.MustParseNID(s)) {
				t.Errorf("%s matches %s", tc.pattern, s)
			}
		}
	}
	if (NIDPattern{}).Matches(lwire.AnyNID) || (NIDPattern{}).String() != "<?>" {
		t.Error("the zero NIDPattern matches or prints wrongly")
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "anything", true},
		{"dd.*", "dd.", true},
		{"dd.*", "dd.17", true},
		{"dd.*", "xdd.17", false},
		{"*.17", "dd.17", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"a**c", "ac", true},
		{"dd.0", "dd.0", true},
		{"dd.0", "dd.00", false},
		{"?", "x", false}, // only '*' is special
		{strings.Repeat("*a", 60) + "b", strings.Repeat("a", 200), false},
	} {
		if got := globMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v", tc.pattern, tc.s, got)
		}
	}
}

// Rule specs come from administrators over the network (lctl, REST).
// ParseRule must never panic, and whatever it accepts must print back to a
// spec that parses to the same command, and be accepted or cleanly refused
// by a head.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{
		"start login nid={192.168.1.[1-128]@tcp 0@lo} rate=100",
		"start dd jobid={dd.0 iozone.*} rate=50 burst=5",
		"start rw opcode={ost_read ost_write 16} rate=10 burst=1 rank=dd",
		"start ddw jobid={dd.*}&opcode={ost_write} rate=5",
		"start x nid={10.[1,3-4].*.[7]@o2ib [fd00::1]@tcp *@lo} rate=7",
		"start all * rate=1000",
		"change dd rate=200 burst=3 rank=login",
		"change default rate=5000",
		"stop dd",
		"start x nid={1.2.3.[9-4]@tcp} rate=1",
		"start x nid={a{b}} rate=1 &",
		"START x JOBID={a=b&c} RATE=1",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		cmd, err := ParseRule(spec)
		if err != nil {
			if !errors.Is(err, ErrBadRule) {
				t.Fatalf("ParseRule(%q): error %v does not wrap ErrBadRule", spec, err)
			}
			return
		}
		text := cmd.String()
		again, err := ParseRule(text)
		if err != nil {
			t.Fatalf("ParseRule(%q) = %q, which does not parse: %v", spec, text, err)
		}
		if !reflect.DeepEqual(cmd, again) {
			t.Fatalf("ParseRule(%q) = %#v\nre-parsed from %q as %#v", spec, cmd, text, again)
		}
		if again.String() != text {
			t.Fatalf("%q re-formats as %q", text, again.String())
		}
		if cmd.Op == OpStart {
			if err := cmd.Rule.Validate(); err != nil {
				t.Fatalf("ParseRule(%q) gave a rule Validate rejects: %v", spec, err)
			}
			m, err := ParseMatch(cmd.Rule.Match.String())
			if err != nil || !reflect.DeepEqual(m, cmd.Rule.Match) {
				t.Fatalf("match %q re-parses as %#v, %v", cmd.Rule.Match, m, err)
			}
		}
		h, err := NewHead(Config{Policy: "tbf", Clock: newFakeClock(), MaxQueued: 4})
		if err != nil {
			t.Fatal(err)
		}
		h.Enqueue(&Item{NID: lwire.MustParseNID("10.3.0.7@o2ib"), JobID: "dd.0", Opcode: wire.OSTWrite})
		_ = h.Apply(cmd) // may refuse (no such rule), must not panic
		if h.Len() != 1 {
			t.Fatalf("Apply(%q) lost the queued item", text)
		}
	})
}
