package mdd

import (
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestClientsOfAnOlderStore: a store written by a binary that kept no
// client records (an MDS upgraded in place, with its clients mounted)
// must not say it had no clients: the restarted MDT would end recovery
// at once, evicting every client that has requests, locks and opens to
// replay and destroying the orphans they hold open. Its clients are
// unknown (nil) until a recovery under this code has ended; a new store
// knows it has none.
func TestClientsOfAnOlderStore(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s.Clients(); err != nil || c == nil || len(c) != 0 {
		t.Fatalf("clients of a new store: %q %v, want none, known", c, err)
	}
	// As the binary before client records left the store.
	for _, k := range [][]byte{keyClientsKnown} {
		if err := s.db.Delete(k, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Set(keyFormat, u64Val(2), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(testConfig(dir)); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if c, err := s.Clients(); err != nil || c != nil {
		t.Fatalf("clients of a store that kept no records: %q %v, want nil (not known)", c, err)
	}
	// Recovery of the first life under this code: its clients reconnect
	// (recorded), then it ends; from then on the records are complete.
	if err := s.AddClient("a"); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Clients(); err != nil || c != nil {
		t.Fatalf("clients before recovery ended: %q %v, want nil (not known)", c, err)
	}
	if err := s.ClientsComplete(); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Clients(); err != nil || !slices.Equal(c, []string{"a"}) {
		t.Fatalf("clients once recovery ended: %q %v, want [a]", c, err)
	}
	if err := s.DropClient("a"); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Clients(); err != nil || c == nil || len(c) != 0 {
		t.Fatalf("clients once a left: %q %v, want none, known", c, err)
	}
}
