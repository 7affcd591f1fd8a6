package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyArgs: bad users and rules files are refused before anything
// is mounted, with messages that say what is wrong.
func TestPolicyArgs(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("archive_after: 10m\nhigh_watermrk: 80\n"), 0o644)
	badDur := filepath.Join(dir, "dur.yaml")
	os.WriteFile(badDur, []byte("archive_after: soon\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--user", "7", "127.0.0.1@tcp:/nacre"}, "want clN"},
		{[]string{"--user", "cl0", "127.0.0.1@tcp:/nacre"}, "want clN"},
		{[]string{"--user", "cl1", "--rules", filepath.Join(dir, "missing.yaml"), "127.0.0.1@tcp:/nacre"}, "rules"},
		{[]string{"--user", "cl1", "--rules", bad, "127.0.0.1@tcp:/nacre"}, "high_watermrk"},
		{[]string{"--user", "cl1", "--rules", badDur, "127.0.0.1@tcp:/nacre"}, "archive_after"},
		{[]string{"--user", "cl1", "nowhere"}, "MGSNID"},
	} {
		cmd := newPolicyCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetArgs(tc.args)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("policy %v: %v, want an error about %q", tc.args, err, tc.want)
		}
	}
}
