package mgs

import (
	"strings"

	"github.com/nacrefs/nacre/internal/errs"
)

// Persistent parameters come to the MGS in two older spellings besides
// its own FSNAME.TARGET.PARAM; PersistentName and ConfParamName turn them
// into it.
//
// lctl set_param -P takes the live name of a parameter, as get_param
// shows it, possibly with globs:
//
//	lctl set_param -P                          stored as
//	osc.nacre-OST0003-osc-*.max_dirty_mb       nacre.OST0003.osc.max_dirty_mb
//	osc.*.max_rpcs_in_flight                   *.*.osc.max_rpcs_in_flight
//	osc.nacre-*.checksums                      nacre.*.osc.checksums
//	mdc.nacre-MDT0000-mdc-*.max_rpcs_in_flight nacre.MDT0000.mdc.max_rpcs_in_flight
//	llite.nacre-*.max_read_ahead_mb            nacre.client.llite.max_read_ahead_mb
//	llite.*.max_cached_mb                      *.client.llite.max_cached_mb
//	ldlm.namespaces.*.lru_size                 *.client.ldlm.lru_size
//	ldlm.namespaces.nacre-*.lru_max_age        nacre.client.ldlm.lru_max_age
//	ost.OSS.ost_io.nrs_policies                *.*.ost.nrs_policies
//	obdfilter.nacre-OST0001.degraded           nacre.OST0001.obdfilter.degraded
//	mdt.nacre-MDT0000.hsm_control              nacre.MDT0000.mdt.hsm_control
//	mdt.*.hsm.max_requests                     *.*.mdt.hsm.max_requests
//	lod.nacre-MDT0000-mdtlov.stripesize        nacre.MDT0000.lod.stripesize
//	timeout (at_min, at_max, ldlm_timeout...)  *.sys.timeout
//	jobid_var                                  *.client.jobid_var
//	nacre.OST0003.osc.max_dirty_mb             as is (the MGS's own form)
//
// The device component gives the filesystem (its first '-' part, so a
// filesystem whose name holds '-' must use the MGS's form) and the target;
// what it says of one client (the -ffff... instance) or one namespace is
// dropped: persistent parameters apply to every client of the filesystem.
// ost.OSS.* is the OSS's one I/O service: it is stored for every OST, and
// a server applies it when one of its OSTs matches.
//
// lctl conf_param takes TARGET-DEVICE.LAYER.PARAM:
//
//	nacre-OST0003.osc.max_dirty_mb     nacre.OST0003.osc.max_dirty_mb
//	nacre-MDT0000.mdt.hsm_control      nacre.MDT0000.mdt.hsm_control
//	nacre-MDT0000.lov.stripesize       nacre.MDT0000.lod.stripesize
//	nacre.llite.max_read_ahead_mb      nacre.client.llite.max_read_ahead_mb
//	nacre.sys.timeout                  nacre.sys.timeout

// PersistentName turns the name lctl set_param -P takes into the MGS's
// FSNAME.TARGET.PARAM (see above), checked against the catalog. Errors
// are errs.Invalid and say what was expected.
func PersistentName(name string) (string, error) {
	if n, err := ParseParamName(name); err == nil {
		return n.String(), nil
	}
	comps := strings.Split(strings.ReplaceAll(name, "/", "."), ".")
	var out string
	switch layer := comps[0]; {
	case len(comps) == 1:
		spec, ok := lookupSpec(name)
		if !ok {
			return "", errs.Errorf(errs.Invalid, "%s: not a persistent parameter (see nacre lctl list_param -P)", name)
		}
		out = "*." + spec.Scope.String() + "." + name
	case (layer == "osc" || layer == "mdc" || layer == "obdfilter" || layer == "mdt" || layer == "lod") && len(comps) >= 3:
		fs, target := splitDevice(comps[1], layer)
		out = fs + "." + target + "." + layer + "." + strings.Join(comps[2:], ".")
	case layer == "llite" && len(comps) == 3:
		fs, _ := splitDevice(comps[1], layer)
		out = fs + ".client.llite." + comps[2]
	case layer == "ldlm" && len(comps) == 4 && comps[1] == "namespaces":
		fs, _ := splitDevice(comps[2], layer)
		out = fs + ".client.ldlm." + comps[3]
	case layer == "ost" && len(comps) == 4 && comps[1] == "OSS":
		out = "*.*.ost." + comps[3]
	default:
		return "", errs.Errorf(errs.Invalid, "%s: no persistent form (want e.g. osc.*.max_dirty_mb, llite.*.max_read_ahead_mb, ost.OSS.ost_io.nrs_policies or FSNAME.TARGET.PARAM)", name)
	}
	n, err := ParseParamName(out)
	if err != nil {
		return "", errs.Errorf(errs.Invalid, "%s (stored as %s): %w", name, out, err)
	}
	return n.String(), nil
}

// splitDevice returns the filesystem and target of a device name as
// get_param shows it: nacre-OST0003-osc-ffff8d2a gives nacre and OST0003;
// a glob for the target, or none (llite's nacre-ffff8d2a), gives "*".
func splitDevice(dev, layer string) (fs, target string) {
	if dev == "*" {
		return "*", "*"
	}
	parts := splitDashes(dev)
	fs, target = parts[0], "*"
	if len(parts) > 1 && parts[1] != layer && (strings.HasPrefix(parts[1], "OST") || strings.HasPrefix(parts[1], "MDT")) {
		target = parts[1]
	}
	return fs, target
}

// splitDashes splits s at the dashes outside [...] (a glob's ranges).
func splitDashes(s string) []string {
	var out []string
	depth, from := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth = max(depth-1, 0)
		case '-':
			if depth == 0 {
				out = append(out, s[from:i])
				from = i + 1
			}
		}
	}
	return append(out, s[from:])
}

// ConfParamName turns the name lctl conf_param takes (see above) into the
// MGS's FSNAME.TARGET.PARAM, checked against the catalog.
func ConfParamName(name string) (string, error) {
	dev, rest, ok := strings.Cut(name, ".")
	if !ok || rest == "" {
		return "", errs.Errorf(errs.Invalid, "%s: want FSNAME-TARGET.LAYER.PARAM or FSNAME.sys.PARAM (e.g. nacre-OST0000.osc.max_dirty_mb)", name)
	}
	var out string
	if i := strings.LastIndex(dev, "-"); i > 0 {
		fs, target := dev[:i], dev[i+1:]
		layer, p, _ := strings.Cut(rest, ".")
		if layer == "lov" {
			layer = "lod"
		}
		out = fs + "." + target + "." + layer + "." + p
	} else {
		layer, _, _ := strings.Cut(rest, ".")
		switch layer {
		case "sys", "client":
			out = dev + "." + rest
		case "llite", "ldlm":
			out = dev + ".client." + rest
		default:
			if spec, ok := lookupSpec(rest); ok {
				out = dev + "." + spec.Scope.String() + "." + rest
			} else {
				return "", errs.Errorf(errs.Invalid, "%s: want FSNAME-TARGET.LAYER.PARAM, FSNAME.llite.PARAM or FSNAME.sys.PARAM", name)
			}
		}
	}
	n, err := ParseParamName(out)
	if err != nil {
		return "", errs.Errorf(errs.Invalid, "%s (stored as %s): %w", name, out, err)
	}
	return n.String(), nil
}
