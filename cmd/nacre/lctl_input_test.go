package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestLctlPingTimeout: lctl ping's TIMEOUT is whole seconds, 1 to 120 as
// Lustre's; anything else is refused before any ping, naming it (not
// read as far as it looks like a number, nor wrapped around).
func TestLctlPingTimeout(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "no-lnet.sock") // (nobody serves it)
	for _, timeout := range []string{"5x", "0", "1.5", "121", "9999999999999", "99999999999999999999"} {
		out, _, err := lctl(t, "ping", "--lnet-socket", sock, "0@lo", timeout)
		if err == nil || !strings.Contains(err.Error(), `timeout "`+timeout+`"`) {
			t.Errorf("lctl ping 0@lo %s: %v, want an error about the timeout", timeout, err)
		}
		if out != "" {
			t.Errorf("lctl ping 0@lo %s printed %q", timeout, out)
		}
	}
}
