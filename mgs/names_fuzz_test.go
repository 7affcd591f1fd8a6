package mgs

import (
	"testing"

	"github.com/nacrefs/nacre/internal/errs"
)

// Parameter and target names arrive from REST and gRPC callers: the parsers
// must refuse junk with Invalid and never panic, and what they accept must
// be stable under a second parse.
func FuzzParseParamName(f *testing.F) {
	for _, s := range []string{
		"nacre.OST0000.osc.max_dirty_mb", "*.MDT*.mdt.hsm_control", "fs.client.llite.max_read_ahead_mb",
		"fs.sys.timeout", "fs[.sys.timeout", "..", "a.b.c", "fs.OST[0-3].osc.checksums", "fs.OST\\", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		pn, err := ParseParamName(name)
		if err != nil {
			if !errs.Is(err, errs.Invalid) {
				t.Fatalf("ParseParamName(%q) error of kind %v: %v", name, errs.KindOf(err), err)
			}
			return
		}
		if pn.FS+"."+pn.Target+"."+pn.Param != name {
			t.Fatalf("parts %q %q %q do not rebuild %q", pn.FS, pn.Target, pn.Param, name)
		}
		if _, err := ParseParamName(name); err != nil {
			t.Fatalf("second parse of %q failed: %v", name, err)
		}
		pn.MatchesFS("nacre") // must not panic on any accepted pattern
	})
}

func FuzzParseTargetName(f *testing.F) {
	for _, s := range []string{"OST0003", "nacre-MDT0000", "MGS0000", "OSTffff", "OST10000", "x-OST0001", "-", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, idx, err := ParseTargetName("", s)
		if err != nil {
			if !errs.Is(err, errs.Invalid) {
				t.Fatalf("ParseTargetName(%q) error of kind %v", s, errs.KindOf(err))
			}
			return
		}
		if !k.Valid() || idx > MaxIndex {
			t.Fatalf("ParseTargetName(%q) = %v %d", s, k, idx)
		}
		short := TargetName(k, idx)
		if k2, idx2, err := ParseTargetName("", short); err != nil || k2 != k || idx2 != idx {
			t.Fatalf("%q -> %s does not round-trip", s, short)
		}
	})
}
