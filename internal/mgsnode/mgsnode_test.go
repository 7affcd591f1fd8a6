package mgsnode

import (
	"slices"
	"testing"
)

func TestParseSource(t *testing.T) {
	for _, tc := range []struct {
		src    string
		addrs  []string
		fsname string
		bad    bool
	}{
		{src: "127.0.0.1@tcp:/nacre", addrs: []string{"127.0.0.1:9880"}, fsname: "nacre"},
		{src: "127.0.0.1@tcp:9999:/nacre", addrs: []string{"127.0.0.1:9999"}, fsname: "nacre"},
		{src: "10.0.0.1@tcp:10.0.0.2@tcp:/fs", addrs: []string{"10.0.0.1:9880", "10.0.0.2:9880"}, fsname: "fs"},
		{src: "10.0.0.1@tcp,10.1.0.1@tcp:7:10.0.0.2@tcp:/fs", addrs: []string{"10.0.0.1:7", "10.0.0.2:9880"}, fsname: "fs"},
		{src: "10.0.0.1@tcp/nacre", bad: true},
		{src: ":/nacre", bad: true},
		{src: "10.0.0.1@tcp:/", bad: true},
		{src: "10.0.0.1@tcp:/a/b", bad: true},
		{src: "host:/nacre", bad: true},
		{src: "10.0.0.1@tcp:99999:/nacre", bad: true},
		{src: "10.0.0.1@nonet:/nacre", bad: true},
	} {
		addrs, fs, err := ParseSource(tc.src)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: got %v %q, want an error", tc.src, addrs, fs)
			}
			continue
		}
		if err != nil || !slices.Equal(addrs, tc.addrs) || fs != tc.fsname {
			t.Errorf("%q: got %v %q %v, want %v %q", tc.src, addrs, fs, err, tc.addrs, tc.fsname)
		}
	}
}

func FuzzParseSource(f *testing.F) {
	for _, s := range []string{"127.0.0.1@tcp:/nacre", "a@tcp:1:b@o2ib:/x", ":/", "@:/:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		addrs, fs, err := ParseSource(s)
		if err == nil && (len(addrs) == 0 || fs == "") {
			t.Fatalf("%q: no error but %v %q", s, addrs, fs)
		}
	})
}
