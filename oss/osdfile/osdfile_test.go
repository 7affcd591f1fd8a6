package osdfile

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/nacrefs/nacre/internal/tmpfs"
	"github.com/nacrefs/nacre/oss/osd"
	"github.com/nacrefs/nacre/oss/osd/osdtest"
)

var bg = context.Background()

// testLogger keeps the device's log lines in the test's output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

func testConfig(t testing.TB) Config {
	cfg := DefaultConfig()
	cfg.Logger = testLogger(t)
	return cfg
}

// newTarget formats a target in a new temporary directory and opens it.
func newTarget(t testing.TB, journal int64) (*Device, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ost")
	return formatOpen(t, dir, journal), dir
}

func formatOpen(t testing.TB, dir string, journal int64) *Device {
	t.Helper()
	fc := DefaultFormatConfig("nacre-OST0000")
	fc.JournalSize = journal
	if err := Format(bg, dir, fc); err != nil {
		t.Fatal(err)
	}
	d, err := Open(bg, dir, testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestConformance(t *testing.T) {
	osdtest.Run(t, osdtest.Harness{
		New: func(t *testing.T) osd.Device {
			d, _ := newTarget(t, MinJournalSize)
			return d
		},
		Small: func(t *testing.T) osd.Device {
			mnt := tmpfs.Mount(t, "8m")
			return formatOpen(t, filepath.Join(mnt, "ost"), MinJournalSize)
		},
		Reopen: func(t *testing.T, dev osd.Device) osd.Device {
			d := dev.(*Device)
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			d2, err := Open(bg, d.dir, testConfig(t))
			if err != nil {
				t.Fatal(err)
			}
			return d2
		},
	})
}

// TestConformanceTmpfs runs the suite on tmpfs too, where fsync is free and
// punch, xattrs and sparse files are the kernel's shmem ones.
func TestConformanceTmpfs(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	osdtest.Run(t, osdtest.Harness{
		New: func(t *testing.T) osd.Device {
			mnt := tmpfs.Mount(t, "2g")
			return formatOpen(t, filepath.Join(mnt, "ost"), MinJournalSize)
		},
	})
}
