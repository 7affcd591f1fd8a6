package mdd

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
)

// TestRepliesKeptAndForgotten: a reply kept reads back, survives a
// restart, and goes once a later request of its client reports a last
// XID past it; records saved by many requests at once leave none behind
// (a delete never goes in before the record it deletes); a client
// forgotten loses them all, and another client's stay.
func TestRepliesKeptAndForgotten(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	s.SaveReply("a", 100, 0, 7, []byte("reply 100"))
	s.SaveReply("b", 100, 0, 8, []byte("b's"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = newStore2(t, dir)
	if tn, body, ok := s.LoadReply("a", 100); !ok || tn != 7 || !bytes.Equal(body, []byte("reply 100")) {
		t.Fatalf("kept reply after a restart: %d %q %v", tn, body, ok)
	}
	if _, _, ok := s.LoadReply("a", 99); ok {
		t.Fatal("a reply never kept")
	}
	// The first save of this life clears the previous life's up to its
	// last XID.
	s.SaveReply("a", 200, 150, 9, nil)
	if _, _, ok := s.LoadReply("a", 100); ok {
		t.Fatal("the previous life's reply outlived a last XID past it")
	}
	var wg sync.WaitGroup
	const workers, each = 8, 200
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				xid := uint64(1000 + i*workers + w)
				s.SaveReply("a", xid, xid-workers, xid, []byte(fmt.Sprint(xid)))
			}
		})
	}
	wg.Wait()
	last := uint64(1000 + each*workers)
	s.SaveReply("a", last, last-1, 1, nil)
	s.SaveReply("a", last+1, last, 1, nil)
	if n, err := s.KeptReplies("a"); err != nil || n != 1 {
		t.Fatalf("%d replies kept for a after its last XID passed all but one (%v)", n, err)
	}
	s.ForgetReplies("a")
	if n, _ := s.KeptReplies("a"); n != 0 {
		t.Fatalf("%d replies kept for a forgotten client", n)
	}
	if _, _, ok := s.LoadReply("b", 100); !ok {
		t.Fatal("b's reply went with a's")
	}
	s.SaveReply("", 1, 0, 1, nil) // refused, logged
	if _, _, ok := s.LoadReply("", 1); ok {
		t.Fatal("a reply kept for no client")
	}
}

func newStore2(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Check(); err != nil {
			t.Errorf("Check after the test: %v", err)
		}
		s.Close()
	})
	return s
}

// TestRepliesOfPreviousLifeForgotten: a record of the previous life goes
// once a last XID passes it, even if the first save of this life had a
// last XID below it (a request still in flight held it down); a second
// save past it left it for good, and each restart could leave more.
func TestRepliesOfPreviousLifeForgotten(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	s.SaveReply("a", 100, 0, 7, nil)
	s.SaveReply("a", 200, 0, 8, nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = newStore2(t, dir)
	// A request of XID 150 is still in flight (resent, or waiting for a
	// lock): the first save of this life says only up to 149.
	s.SaveReply("a", 300, 149, 9, nil)
	if _, _, ok := s.LoadReply("a", 200); !ok {
		t.Fatal("the previous life's reply went before a last XID passed it")
	}
	s.SaveReply("a", 400, 300, 10, nil)
	if n, err := s.KeptReplies("a"); err != nil || n != 1 {
		t.Fatalf("%d replies kept for a after its last XID passed all but one (%v)", n, err)
	}
}
