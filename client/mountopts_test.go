package client_test

import (
	"slices"
	"testing"

	"github.com/nacrefs/nacre/client"
)

// TestParseMountOptions: flag options take no value (ro=0 turned ro on,
// user_xattr=0 user_xattr), localflock is local locks (not the LDLM's
// flock, which it used to turn on), the last of a pair wins, and FUSE's
// options come back.
func TestParseMountOptions(t *testing.T) {
	for _, tc := range []struct {
		opts       string
		ok         bool
		ro, fl, lf bool
		userXattr  bool
		rest       []string
	}{
		{opts: "", ok: true, fl: true, userXattr: true},
		{opts: "ro", ok: true, ro: true, fl: true, userXattr: true},
		{opts: "ro,rw", ok: true, fl: true, userXattr: true},
		{opts: "ro=0", ok: false},
		{opts: "user_xattr=0", ok: false},
		{opts: "flock=1", ok: false},
		{opts: "noflock", ok: true, userXattr: true},
		{opts: "localflock", ok: true, lf: true, userXattr: true},
		{opts: "localflock,flock", ok: true, fl: true, userXattr: true},
		{opts: "flock,localflock", ok: true, lf: true, userXattr: true},
		{opts: "nouser_xattr,allow_other", ok: true, fl: true, rest: []string{"allow_other"}},
	} {
		c := client.DefaultConfig()
		rest, err := c.ParseOptions(tc.opts)
		if !tc.ok {
			if err == nil {
				t.Errorf("%q: accepted: %+v", tc.opts, c)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.opts, err)
			continue
		}
		if c.ReadOnly != tc.ro || c.Flock != tc.fl || c.LocalFlock != tc.lf || c.UserXattr != tc.userXattr || !slices.Equal(rest, tc.rest) {
			t.Errorf("%q: ro %v flock %v localflock %v user_xattr %v rest %q; want %v %v %v %v %q",
				tc.opts, c.ReadOnly, c.Flock, c.LocalFlock, c.UserXattr, rest, tc.ro, tc.fl, tc.lf, tc.userXattr, tc.rest)
		}
	}
}
