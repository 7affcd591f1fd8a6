package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/lnet/lnettest"
)

// testLNet is a loopback LNet config on a free socklnd port.
func testLNet(t *testing.T) lnet.Config {
	t.Helper()
	return lnettest.Config("127.0.0.1", lnettest.FreePort(t, "127.0.0.1"))
}

// TestStartServerMDTStoreLost: an MDT whose namespace store is gone (a
// store on its own mount that did not mount, a restore that brought back
// only the identity) must not be served: opening it would format a new,
// empty namespace under the target's old identity and uuid, and the MDT
// would then hand out object ids the OSTs already hold.
func TestStartServerMDTStoreLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, store string)
	}{
		{"removed", func(t *testing.T, store string) {
			if err := os.RemoveAll(store); err != nil {
				t.Fatal(err)
			}
		}},
		{"emptied", func(t *testing.T, store string) {
			if err := os.RemoveAll(store); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(store, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "mdt0")
			// The MGS is never reached: the MDT is refused before it registers.
			if _, err := FormatMDT(ctx, dir, TargetIdentity{FSName: "lost", MGSNodes: []string{"127.0.0.1:1"}}); err != nil {
				t.Fatal(err)
			}
			store := filepath.Join(dir, mdtDir)
			tc.lose(t, store)
			st, err := StartServer(ctx, ServerConfig{Dirs: []string{dir}, LNet: testLNet(t), Logger: quiet})
			if err == nil {
				st.Close(context.Background())
				t.Fatal("an MDT without its store was served")
			}
			if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "does not exist") {
				t.Fatalf("error %q: want one naming %s and saying its store does not exist", err, dir)
			}
			ents, _ := os.ReadDir(store)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), "MANIFEST") {
					t.Fatalf("a new store was formatted in %s: %s", store, e.Name())
				}
			}
		})
	}
}

// TestMkfsFailedLeavesNoTarget: a mkfs whose store cannot be formatted (an
// unknown --backend) fails and leaves the directory as it found it: no
// identity that `nacre server` or `nacre up` would take for a formatted
// target, and nothing that makes the corrected mkfs refuse the directory
// as not empty.
func TestMkfsFailedLeavesNoTarget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "ost3")
	id := TargetIdentity{FSName: "half", Index: 3, MGSNodes: []string{"127.0.0.1@tcp"}, Backend: "zfs"}
	if _, err := FormatOST(ctx, dir, id); err == nil || !strings.Contains(err.Error(), `"zfs"`) {
		t.Fatalf("mkfs with backend zfs: %v, want an unknown backend error", err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("after the failed mkfs %s holds %v (%v), want nothing", dir, names, err)
	}
	if _, err := ReadTarget(dir); err == nil {
		t.Fatal("the failed mkfs left a target identity")
	}
	id.Backend = "file"
	got, err := FormatOST(ctx, dir, id)
	if err != nil {
		t.Fatalf("mkfs again with backend file: %v", err)
	}
	read, err := ReadTarget(dir)
	if err != nil || read.Label != "half-OST0003" || read.Backend != "file" || read.UUID != got.UUID {
		t.Fatalf("identity %+v (%v), want half-OST0003 on file with uuid %s", read, err, got.UUID)
	}
}

// TestTargetInUse: a target another process serves (its target lock held)
// is refused by a second server and by the replay barrier's restore, which
// used to delete the live store from under it; once the lock is free, the
// restore puts the saved store in place.
func TestTargetInUse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := filepath.Join(t.TempDir(), "ost0")
	if _, err := FormatOST(ctx, dir, TargetIdentity{FSName: "busy", MGSNodes: []string{"127.0.0.1:1"}, Backend: "file"}); err != nil {
		t.Fatal(err)
	}
	store, saved := filepath.Join(dir, osdDir), filepath.Join(dir, replayBarrierDir)
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(store, "marker"), "live")
	write(filepath.Join(saved, "marker"), "saved")
	marker := func() string {
		b, _ := os.ReadFile(filepath.Join(store, "marker"))
		return string(b)
	}
	release, err := lockTarget(dir) // the other process serving it
	if err != nil {
		t.Fatal(err)
	}
	if err := RestoreReplayBarrier(dir); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("restore of a target in use: %v, want EBUSY", err)
	}
	st, err := StartServer(ctx, ServerConfig{Dirs: []string{dir}, LNet: testLNet(t), RestoreReplayBarrier: true, Logger: quiet})
	if err == nil {
		st.Close(context.Background())
		t.Fatal("a second server started on a target in use")
	}
	if !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second server: %v, want EBUSY naming %s", err, dir)
	}
	if m := marker(); m != "live" {
		t.Fatalf("the live store's marker reads %q after the refusals, want live", m)
	}
	release()
	if err := RestoreReplayBarrier(dir); err != nil {
		t.Fatalf("restore of a stopped target: %v", err)
	}
	if m := marker(); m != "saved" {
		t.Fatalf("after the restore the store's marker reads %q, want saved", m)
	}
}
