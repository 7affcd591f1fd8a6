package mdd

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
)

// The clients connected to the MDT, kept across restarts as Lustre keeps
// them in last_rcvd: after a restart, recovery waits for exactly these to
// come back and replay, and ends as soon as they have, instead of
// running out its whole window. A record goes in, synced, when a client
// connects afresh and out when it disconnects or is evicted; a client
// that was connected when the MDT stopped keeps its record.

// maxClientUUID bounds a client UUID (Lustre's are 40 bytes).
const maxClientUUID = 255

// clientKey is uuid's record key; EINVAL for an empty or over-long uuid.
func clientKey(uuid string) ([]byte, error) {
	if uuid == "" || len(uuid) > maxClientUUID {
		return nil, fail(syscall.EINVAL, "client uuid of %d bytes", len(uuid))
	}
	return append([]byte{pfxClient}, uuid...), nil
}

// AddClient records that uuid is connected; synced before it returns, so
// that a restart right after waits for it.
func (s *Store) AddClient(uuid string) error {
	k, err := clientKey(uuid)
	if err != nil {
		return err
	}
	return ioError(s.db.Set(k, nil, pebble.Sync), "record client %q", uuid)
}

// DropClient forgets uuid (disconnected or evicted); not synced: a
// restart that still finds it waits for it in vain, no longer than the
// recovery window.
func (s *Store) DropClient(uuid string) error {
	k, err := clientKey(uuid)
	if err != nil {
		return err
	}
	return ioError(s.db.Delete(k, pebble.NoSync), "forget client %q", uuid)
}

// ClientsComplete says the client records now list every client the MDT
// has: its recovery has ended, so every client it serves connected under
// this code (OnNewClient) and the others are evicted. Until then a store
// of a binary that kept no records (an upgrade) has its clients unknown.
func (s *Store) ClientsComplete() error {
	if _, err := s.dbGet(keyClientsKnown); err == nil {
		return nil
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return ioError(err, "clients known")
	}
	return ioError(s.db.Set(keyClientsKnown, nil, pebble.Sync), "clients known")
}

// Clients returns the clients recorded as connected; nil if the records
// are not known to be complete (a store of an older binary, up to the end
// of its first recovery under this code: ClientsComplete), when recovery
// must run its whole window.
func (s *Store) Clients() ([]string, error) {
	if _, err := s.dbGet(keyClientsKnown); errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, ioError(err, "clients known")
	}
	out := []string{} // not nil: known, if empty
	err := s.scan([]byte{pfxClient}, func(k, _ []byte) error {
		if len(k) < 2 || len(k) > 1+maxClientUUID {
			return fmt.Errorf("bad client key of %d bytes", len(k))
		}
		out = append(out, string(k[1:]))
		return nil
	})
	return out, ioError(err, "clients")
}
