package llite_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nacrefs/nacre/internal/clustertest"
)

// TestWriteClearsSetID: a write by a user who may write a set-ID file but
// does not own it succeeds and clears the set-ID bits, as on a local file
// system, whichever way it comes: a buffered write (the kernel's SETATTR
// for it), an append (a direct write flagged FUSE_WRITE_KILL_SUIDGID), or
// a truncate.
func TestWriteClearsSetID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("running as another user needs root")
	}
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, Clients: 1})
	a := mountT(t, c, 0)
	d := mkdir(t, filepath.Join(a.Dir(), "setid"), 0o777)
	for _, tt := range []struct {
		name string
		mode os.FileMode // as os.Chmod takes it
		cmd  string
		size int64
	}{
		{"buffered write", os.ModeSetuid | 0o777, "printf zz | dd of=\"$F\" conv=notrunc status=none", 5},
		{"append", os.ModeSetuid | os.ModeSetgid | 0o777, "echo y >> \"$F\"", 7},
		{"truncate", os.ModeSetuid | 0o777, "truncate -s 1 \"$F\"", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := filepath.Join(d, tt.name)
			if err := os.WriteFile(f, []byte("hello"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(f, tt.mode); err != nil {
				t.Fatal(err)
			}
			cmd := "F=" + shellQuote(f) + "; " + tt.cmd
			if out, ok := asNobody(t, "sh", "-c", cmd); !ok {
				t.Fatalf("nobody: %s: %q", tt.cmd, out)
			}
			st, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || st.Mode().Perm() != 0o777 || st.Size() != tt.size {
				t.Fatalf("after %s: mode %v size %d, want -rwxrwxrwx size %d", tt.cmd, st.Mode(), st.Size(), tt.size)
			}
			var sys syscall.Stat_t
			if err := syscall.Stat(f, &sys); err != nil || sys.Uid != 0 {
				t.Fatalf("owner %d, %v: the write must not change it", sys.Uid, err)
			}
		})
	}
}

func shellQuote(s string) string {
	return "'" + s + "'"
}
