package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLfsMkdirOffNacre: lfs mkdir of a directory that would not be on a
// Nacre mount fails, as Lustre's does off Lustre, and makes nothing.
func TestLfsMkdirOffNacre(t *testing.T) {
	base := t.TempDir() // (not on a Nacre mount)
	for i, args := range [][]string{{"mkdir", "-i", "0"}, {"mkdir"}, {"setdirstripe", "-c", "1"}} {
		d := filepath.Join(base, fmt.Sprint("sub", i))
		out, stderr, err := lfs(t, append(args, d)...)
		if err == nil || !strings.Contains(err.Error(), "not on a Nacre mount") {
			t.Errorf("lfs %s %s: %v (%q %q), want an error saying it is not on a Nacre mount", strings.Join(args, " "), d, err, out, stderr)
		}
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("lfs %s %s made the directory off Nacre: %v", strings.Join(args, " "), d, err)
		}
	}
}

// TestLfsFindSizeOverflow: a -size past what a file size can be is
// refused, not wrapped around into a small (or negative) limit that every
// file is larger than.
func TestLfsFindSizeOverflow(t *testing.T) {
	for _, arg := range []string{"+16E", "+8E", "-8E", "9223372036854775808", "+8388608T", "+99999999999999999G"} {
		ft, err := parseFindTest("size", arg)
		if err == nil {
			t.Errorf("-size %s accepted (limit %d*%d): a 1 MiB file matches: %v", arg, ft.n, ft.units, sizeMatch(1<<20, &ft))
		}
	}
	// The largest that fit still work.
	for _, tc := range []struct {
		arg  string
		size int64
		want bool
	}{{"+7E", 1 << 20, false}, {"-7E", 1 << 20, true}, {"+8388607T", 1 << 62, false}, {"9223372036854775807", 1 << 20, false}} {
		ft, err := parseFindTest("size", tc.arg)
		if err != nil {
			t.Errorf("-size %s: %v", tc.arg, err)
			continue
		}
		if got := sizeMatch(tc.size, &ft); got != tc.want {
			t.Errorf("-size %s of %d: %v, want %v", tc.arg, tc.size, got, tc.want)
		}
	}
}
