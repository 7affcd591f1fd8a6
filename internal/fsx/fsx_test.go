package fsx

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunLocal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := Run(context.Background(), OSFile{f}, Config{Ops: 20000, MaxSize: 256 << 10, MaxLen: 16 << 10, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	if st.Writes == 0 || st.Reads == 0 || st.Truncates == 0 || st.Appends == 0 {
		t.Fatalf("a run without every kind of operation: %+v", st)
	}
}

// lossy drops every 500th write: the exerciser must notice.
type lossy struct {
	OSFile
	n int
}

func (l *lossy) WriteAt(p []byte, off int64) (int, error) {
	l.n++
	if l.n%500 == 0 {
		return len(p), nil
	}
	return l.OSFile.WriteAt(p, off)
}

func TestRunCatchesLoss(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = Run(context.Background(), &lossy{OSFile: OSFile{f}}, Config{Ops: 20000, MaxSize: 256 << 10, MaxLen: 16 << 10, Seed: 7})
	if err == nil || !strings.Contains(err.Error(), "last operations") {
		t.Fatalf("a file that drops writes passed: %v", err)
	}
}
