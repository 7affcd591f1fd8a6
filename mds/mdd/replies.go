package mdd

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Replies of changes kept across restarts (ptlrpc.ReplyStore; Lustre's
// reply data in last_rcvd). A client whose reply was lost resends its
// request; after a restart the MDT no longer has the reply in memory,
// and without this record it would make the change again (a mkdir done
// before the restart would fail with EEXIST). A record goes in after its
// change's batch, not synced: it reaches the disk with the change or
// after it, never before. Records go once the client's later requests say
// it has the replies (their last XID), and all of a client's when it goes.
//
// Key: pfxReply, the client UUID's length (a byte), the UUID, the XID
// (8 bytes, big-endian). Value: the transno (8 bytes, little-endian) and
// the reply body.

// maxKeptReplies bounds the records a client keeps in one life of the
// MDT: one that never reports a last XID loses its oldest.
const maxKeptReplies = 1024

// replyBook is what the store remembers of the reply records: the XIDs
// each client has records for, read from the store at its first save in
// this life (those of earlier lives) and saved since.
type replyBook struct {
	// flushMu orders the batches of records (flushReplies); dbClosed,
	// under it, says the database is closed.
	flushMu  sync.Mutex
	dbClosed bool
	mu       sync.Mutex
	clients  map[string]*keptReplies
	// pending holds the records and deletes not in the store yet, and
	// waiting the records in it; timer flushes them if no change does.
	pending *pebble.Batch
	waiting []pendingReply
	timer   *time.Timer
}

type keptReplies struct {
	kept []keptReply // ascending XIDs
}

// find returns where xid is, or would go, in kr.kept.
func (kr *keptReplies) find(xid uint64) (int, bool) {
	return slices.BinarySearchFunc(kr.kept, xid, func(k keptReply, x uint64) int { return cmp.Compare(k.xid, x) })
}

// keptReply is a record the store has or will have.
type keptReply struct {
	xid uint64
}

// replyPrefix is the key prefix of client's records.
func replyPrefix(client string) ([]byte, error) {
	if client == "" || len(client) > maxClientUUID {
		return nil, fail(syscall.EINVAL, "client uuid of %d bytes", len(client))
	}
	k := make([]byte, 0, 2+len(client)+8)
	k = append(k, pfxReply, byte(len(client)))
	return append(k, client...), nil
}

func replyKey(prefix []byte, xid uint64) []byte {
	return binary.BigEndian.AppendUint64(slices.Clip(prefix), xid)
}

// SaveReply keeps client's reply to request xid, whose change got
// transno, and drops those of its requests up to lastXID. The records of
// replies sent within replyFlushDelay go in together, in a batch of their
// own (or with the next Sync), after the changes they answer: a batch for
// every reply cost each create a second commit, and made creates wait
// for each other's. Errors are logged: the reply went to the client
// already, and only a resend after a restart misses the record.
func (s *Store) SaveReply(client string, xid, lastXID, transno uint64, body []byte) {
	pfx, err := replyPrefix(client)
	if err != nil {
		s.log.Warn("mdd: reply not kept", "client", client, "xid", xid, "err", err)
		return
	}
	v := make([]byte, 8, 8+len(body))
	binary.LittleEndian.PutUint64(v, transno)
	s.replies.mu.Lock()
	if s.replies.clients == nil {
		s.replies.clients = make(map[string]*keptReplies)
	}
	kr := s.replies.clients[client]
	if kr == nil {
		// Its first save in this life: the records of earlier lives go
		// as this life's do, once a last XID passes them. (Cleared only
		// up to the first last XID, which a request in flight holds
		// down, those past it stayed until the client went.)
		kr = &keptReplies{kept: s.earlierRepliesLocked(client, pfx)}
		s.replies.clients[client] = kr
	}
	b := s.replies.pending
	if b == nil {
		b = s.db.NewBatch()
		s.replies.pending = b
	}
	b.Set(replyKey(pfx, xid), append(v, body...), nil)
	// A delete goes after its record whatever batch each is in: the
	// batches that carry records commit one at a time, in the order they
	// were filled (flushReplies).
	kept := kr.kept[:0]
	for i, k := range kr.kept {
		if k.xid <= lastXID || len(kr.kept)-i > maxKeptReplies {
			b.Delete(replyKey(pfx, k.xid), nil)
			continue
		}
		kept = append(kept, k)
	}
	clear(kr.kept[len(kept):])
	kr.kept = kept
	i, _ := kr.find(xid)
	kr.kept = slices.Insert(kr.kept, i, keptReply{xid: xid})
	s.replies.waiting = append(s.replies.waiting, pendingReply{client: client, kr: kr, xid: xid})
	full := len(s.replies.waiting) >= maxPendingReplies
	if !full && s.replies.timer == nil {
		s.replies.timer = time.AfterFunc(replyFlushDelay, func() { s.flushReplies() })
	}
	s.replies.mu.Unlock()
	if full {
		s.flushReplies()
	}
}

// replyFlushDelay bounds how long a reply record waits in memory for the
// others of its batch; maxPendingReplies how many wait.
const (
	replyFlushDelay   = 5 * time.Millisecond
	maxPendingReplies = 1024
)

// pendingReply is a record in the pending batch, ended by repliesIn once
// the batch is in or failed.
type pendingReply struct {
	client string
	kr     *keptReplies
	xid    uint64
}

// takeReplies takes the pending reply records, for the caller's batch.
func (s *Store) takeReplies() (*pebble.Batch, []pendingReply) {
	s.replies.mu.Lock()
	defer s.replies.mu.Unlock()
	b, w := s.replies.pending, s.replies.waiting
	s.replies.pending, s.replies.waiting = nil, nil
	if s.replies.timer != nil {
		s.replies.timer.Stop()
		s.replies.timer = nil
	}
	return b, w
}

// flushReplies commits the pending reply records in a batch of their own.
// The batches go in one at a time, in the order they were filled, so a
// record's delete never lands before the record.
func (s *Store) flushReplies() {
	s.replies.flushMu.Lock()
	defer s.replies.flushMu.Unlock()
	if s.replies.dbClosed {
		return
	}
	b, w := s.takeReplies()
	if b == nil {
		return
	}
	err := b.Commit(pebble.NoSync)
	b.Close()
	s.repliesIn(w, err)
}

// repliesIn ends the records of w once their batch went in (err nil) or
// failed (they are no longer kept). A record of a client forgotten
// meanwhile goes.
func (s *Store) repliesIn(w []pendingReply, err error) {
	if len(w) == 0 {
		return
	}
	if err != nil {
		s.log.Warn("mdd: replies not kept", "records", len(w), "err", err)
	}
	s.replies.mu.Lock()
	defer s.replies.mu.Unlock()
	for _, p := range w {
		if s.replies.clients[p.client] != p.kr {
			// The client was forgotten as the record went in: it goes too.
			if err == nil {
				if pfx, perr := replyPrefix(p.client); perr == nil {
					if derr := s.db.Delete(replyKey(pfx, p.xid), pebble.NoSync); derr != nil {
						s.log.Warn("mdd: reply of a departed client not forgotten", "client", p.client, "xid", p.xid, "err", derr)
					}
				}
			}
			continue
		}
		if err == nil {
			continue
		}
		kr := p.kr
		if i, found := kr.find(p.xid); found {
			kr.kept = slices.Delete(kr.kept, i, i+1)
		}
	}
}

// earlierRepliesLocked returns the XIDs of the records client has in the
// store; pfx is its key prefix. An unreadable store is logged:
// the records not read stay until the client goes. s.replies.mu is held.
func (s *Store) earlierRepliesLocked(client string, pfx []byte) []keptReply {
	var kept []keptReply
	err := s.scan(pfx, func(k, _ []byte) error {
		if len(k) != len(pfx)+8 {
			return fmt.Errorf("bad reply key of %d bytes", len(k))
		}
		kept = append(kept, keptReply{xid: binary.BigEndian.Uint64(k[len(pfx):])})
		return nil
	})
	if err != nil {
		s.log.Warn("mdd: replies kept before not read", "client", client, "err", ioError(err, "replies kept for %q", client))
	}
	return kept
}

// LoadReply returns the reply kept for client's request xid.
func (s *Store) LoadReply(client string, xid uint64) (transno uint64, body []byte, ok bool) {
	pfx, err := replyPrefix(client)
	if err != nil {
		return 0, nil, false
	}
	s.flushReplies() // (one still waiting is kept too; resends are rare)
	v, err := s.dbGet(replyKey(pfx, xid))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		return 0, nil, false
	case err != nil:
		s.log.Warn("mdd: kept reply unreadable", "client", client, "xid", xid, "err", err)
		return 0, nil, false
	case len(v) < 8:
		s.log.Warn("mdd: kept reply damaged", "client", client, "xid", xid, "len", len(v))
		return 0, nil, false
	}
	return binary.LittleEndian.Uint64(v), v[8:], true
}

// ForgetReplies drops every reply kept for client.
func (s *Store) ForgetReplies(client string) {
	pfx, err := replyPrefix(client)
	if err != nil {
		return
	}
	s.replies.mu.Lock()
	defer s.replies.mu.Unlock()
	kr, known := s.replies.clients[client]
	delete(s.replies.clients, client)
	// No tombstone for a client with nothing kept (most connect and go
	// without a change): they would pile up with clients coming and
	// going. Its pending records go after their batch (repliesIn).
	if known && len(kr.kept) == 0 {
		return
	}
	if !known {
		some := false
		if err := s.scan(pfx, func(_, _ []byte) error { some = true; return errStop }); err == nil && !some {
			return
		}
	}
	end := append(slices.Clip(pfx), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	if err := s.db.DeleteRange(pfx, end, pebble.NoSync); err != nil {
		s.log.Warn("mdd: kept replies not forgotten", "client", client, "err", fmt.Errorf("delete range: %w", err))
	}
}

// KeptReplies counts the replies kept for client.
func (s *Store) KeptReplies(client string) (int, error) {
	pfx, err := replyPrefix(client)
	if err != nil {
		return 0, err
	}
	s.flushReplies()
	n := 0
	err = s.scan(pfx, func(k, _ []byte) error {
		if len(k) != len(pfx)+8 {
			return fmt.Errorf("bad reply key of %d bytes", len(k))
		}
		n++
		return nil
	})
	return n, ioError(err, "replies kept for %q", client)
}
