package durable_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nacrefs/nacre/internal/durable"
)

// TestWriteFile: the file holds the data with the permissions asked,
// replaces what was there, and leaves no temporary file beside it.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "conf")
	for _, data := range []string{"first\n", "second, longer\n"} {
		if err := durable.WriteFile(p, []byte(data), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := durable.SyncDir(dir); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != data {
			t.Fatalf("read back %q (%v), want %q", got, err, data)
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o640 {
			t.Fatalf("mode %v (%v), want 0640", fi.Mode(), err)
		}
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 1 {
		t.Fatalf("directory holds %v (%v), want the file alone", ents, err)
	}
	if err := durable.WriteFile(filepath.Join(dir, "missing", "f"), []byte("x"), 0o644); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
}
