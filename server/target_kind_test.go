package server

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStartServerMGT: a directory whose identity is an MGT's (Lustre's
// MGS target, with or without a file system name) is refused as an MGT
// that this server does not run, not as a damaged target.
func TestStartServerMGT(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct{ name, json string }{
		{"label MGS", `{"fsname": "", "kind": "MGT", "index": 0, "label": "MGS", "uuid": "6d0c5a52-6f43-4a53-9a39-1b1f2f0c8a11"}`},
		{"label fs-MGT0000", `{"fsname": "nacre", "kind": "MGT", "index": 0, "label": "nacre-MGT0000", "uuid": "6d0c5a52-6f43-4a53-9a39-1b1f2f0c8a11"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, TargetFile), []byte(tc.json), 0o644); err != nil {
				t.Fatal(err)
			}
			st, err := StartServer(ctx, ServerConfig{Dirs: []string{dir}, LNet: testLNet(t), Logger: quiet})
			if err == nil {
				st.Close(context.Background())
				t.Fatal("an MGT was served")
			}
			if msg := err.Error(); strings.Contains(msg, "damaged") || !strings.Contains(msg, "an MGT") || !strings.Contains(msg, "not served here") || !strings.Contains(msg, dir) {
				t.Fatalf("error %q: want one naming %s as an MGT not served here", err, dir)
			}
		})
	}
}
