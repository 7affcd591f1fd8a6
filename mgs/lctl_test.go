package mgs

import (
	"testing"

	"github.com/nacrefs/nacre/internal/errs"
)

func TestPersistentName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"osc.nacre-OST0003-osc-ffff8d2a.max_dirty_mb", "nacre.OST0003.osc.max_dirty_mb"},
		{"osc.nacre-OST0003-osc-*.max_dirty_mb", "nacre.OST0003.osc.max_dirty_mb"},
		{"osc/*/max_rpcs_in_flight", "*.*.osc.max_rpcs_in_flight"},
		{"osc.nacre-*.checksums", "nacre.*.osc.checksums"},
		{"osc.*-osc-*.max_pages_per_rpc", "*.*.osc.max_pages_per_rpc"},
		{"osc.nacre-OST000[0-3]-osc-*.max_dirty_mb", "nacre.OST000[0-3].osc.max_dirty_mb"},
		{"mdc.nacre-MDT0000-mdc-*.max_rpcs_in_flight", "nacre.MDT0000.mdc.max_rpcs_in_flight"},
		{"llite.nacre-ffff8d2a.max_read_ahead_mb", "nacre.client.llite.max_read_ahead_mb"},
		{"llite.*.max_cached_mb", "*.client.llite.max_cached_mb"},
		{"ldlm.namespaces.*.lru_size", "*.client.ldlm.lru_size"},
		{"ldlm.namespaces.nacre-OST0000-osc-ffff8d2a.lru_max_age", "nacre.client.ldlm.lru_max_age"},
		{"ost.OSS.ost_io.nrs_policies", "*.*.ost.nrs_policies"},
		{"obdfilter.nacre-OST0001.degraded", "nacre.OST0001.obdfilter.degraded"},
		{"mdt.nacre-MDT0000.hsm_control", "nacre.MDT0000.mdt.hsm_control"},
		{"mdt.*.hsm.max_requests", "*.*.mdt.hsm.max_requests"},
		{"lod.nacre-MDT0000-mdtlov.stripesize", "nacre.MDT0000.lod.stripesize"},
		{"timeout", "*.sys.timeout"},
		{"jobid_var", "*.client.jobid_var"},
		{"nacre.OST0003.osc.max_dirty_mb", "nacre.OST0003.osc.max_dirty_mb"},
	} {
		got, err := PersistentName(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("PersistentName(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{
		"osc.*.stats",                      // not persistent
		"osc.*.max_dirty",                  // no such parameter
		"obdfilter.nacre-MDT0000.degraded", // an OST parameter on an MDT
		"llite.*.max_read_ahead_mb.x",
		"nosuch",
		"foo.bar.baz",
	} {
		if got, err := PersistentName(bad); err == nil || errs.KindOf(err) != errs.Invalid {
			t.Errorf("PersistentName(%q) = %q, %v; want an Invalid error", bad, got, err)
		}
	}
}

func TestConfParamName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"nacre-OST0003.osc.max_dirty_mb", "nacre.OST0003.osc.max_dirty_mb"},
		{"nacre-MDT0000.mdt.hsm_control", "nacre.MDT0000.mdt.hsm_control"},
		{"nacre-MDT0000.lov.stripesize", "nacre.MDT0000.lod.stripesize"},
		{"nacre.llite.max_read_ahead_mb", "nacre.client.llite.max_read_ahead_mb"},
		{"nacre.sys.timeout", "nacre.sys.timeout"},
		{"nacre.timeout", "nacre.sys.timeout"},
		{"my-fs-OST0001.ost.nrs_policies", "my-fs.OST0001.ost.nrs_policies"},
	} {
		got, err := ConfParamName(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ConfParamName(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"nacre", "nacre-OST0003.osc.max_dirt_mb", "nacre.osc.max_dirty_mb", "nacre-XYZ0.osc.max_dirty_mb"} {
		if got, err := ConfParamName(bad); err == nil {
			t.Errorf("ConfParamName(%q) = %q; want an error", bad, got)
		}
	}
}
