package mdd

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
)

var root = Req{Cred: Root()}

// user is an unprivileged caller.
func user(uid, gid uint32, groups ...uint32) Req {
	return Req{Cred: Cred{UID: uid, GID: gid, Groups: groups}}
}

func testConfig(dir string) Config {
	cfg := DefaultConfig(dir)
	cfg.SyncInterval = 0
	var tick int64 = 1_700_000_000_000_000_000
	cfg.Now = func() time.Time { tick += 1000; return time.Unix(0, tick) } // distinct, increasing
	return cfg
}

// newStore opens a store in a temporary directory; at the end of the test
// it runs Check and closes it.
func newStore(t testing.TB) *Store {
	t.Helper()
	s, err := Open(testConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Check(); err != nil {
			t.Errorf("Check after the test: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func check(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
}

func wantErrno(t testing.TB, what string, err error, want syscall.Errno) {
	t.Helper()
	if want == 0 {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return
	}
	if !errors.Is(err, want) || Errno(err) != want {
		t.Fatalf("%s: error %v, want %v (%d)", what, err, want, want)
	}
}

func mkdir(t testing.TB, s *Store, r Req, parent fid.FID, name string, mode uint32) fid.FID {
	t.Helper()
	a, err := s.Mkdir(r, parent, name, Spec{Mode: mode})
	if err != nil {
		t.Fatalf("mkdir %q: %v", name, err)
	}
	return a.FID
}

func create(t testing.TB, s *Store, r Req, parent fid.FID, name string, mode uint32) fid.FID {
	t.Helper()
	a, err := s.Create(r, parent, name, Spec{Mode: mode})
	if err != nil {
		t.Fatalf("create %q: %v", name, err)
	}
	return a.FID
}

func getattr(t testing.TB, s *Store, f fid.FID) Attr {
	t.Helper()
	a, err := s.Getattr(f)
	if err != nil {
		t.Fatalf("getattr %v: %v", f, err)
	}
	return a
}

// striped is a 2-stripe layout with objects on OSTs 0 and 1.
func striped(oid uint32) *layout.Layout {
	l := layout.Plain(layout.RAID0{StripeCount: 2, StripeSize: 1 << 20, StripeOffset: layout.AnyOffset, Objects: []layout.Object{
		{OSTIndex: 0, Object: fid.FID{Seq: 0x100000000, Oid: oid}},
		{OSTIndex: 1, Object: fid.FID{Seq: 0x100010000, Oid: oid}},
	}})
	return &l
}
