package ofd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/oss/osd"
)

// The OST's client records (Lustre's last_rcvd client slots): the uuid of
// every client connected, kept in one bookkeeping object in fixed slots,
// so that after a restart recovery knows whom to wait for, ends as soon
// as they are all back, and lets nothing new in before
// (ptlrpc.TargetConfig.Clients).
//
// A slot is slotSize bytes: slotMagic, the uuid's length, the uuid, zeros;
// a free slot is all zeros. A client's slot is written (and synced) when
// it connects afresh, zeroed when it disconnects or is evicted.
const (
	slotSize  = 256
	slotMagic = 'C'
	// maxUUID is the longest client uuid a CONNECT carries.
	maxUUID = 128
)

// clientsFID is the object holding the client records: object 0 of
// Lustre's FID_SEQ_LOCAL_FILE, a sequence no OST data lives in; as every
// object 0 (LAST_ID), out of clients' reach.
var clientsFID = fid.FID{Seq: 0x200000001}

// clientRecords is the in-memory index of the slots.
type clientRecords struct {
	dev    osd.Device
	mu     sync.Mutex
	slots  map[string]int // uuid -> slot
	free   []int          // free slots below len, lowest last
	len    int            // slots the object has room for
	exists bool           // the object exists
	// unsynced: a record was made and its sync failed; the next add
	// syncs, even of a client recorded already.
	unsynced bool
	// off: the records could not be read nor reset (the object's
	// attributes are damaged): nothing is recorded in this life, and
	// connects are not refused for it.
	off bool
}

// loadClients reads the client records of dev. It returns the uuids
// recorded, or nil (not known) if dev has no records (an OST formatted
// before they existed) or they are damaged: recovery then runs its whole
// window, as before.
func loadClients(ctx context.Context, dev osd.Device) (*clientRecords, []string, error) {
	cr := &clientRecords{dev: dev, slots: make(map[string]int)}
	a, err := dev.GetAttr(ctx, clientsFID)
	if errors.Is(err, osd.ErrNotExist) {
		return cr, nil, nil
	}
	if errors.Is(err, osd.ErrCorrupt) {
		cr.exists = true
		return cr, nil, fmt.Errorf("client records: %w", err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("client records: %w", err)
	}
	cr.exists = true
	if a.Size%slotSize != 0 || a.Size > osd.MaxRecordSize*64 {
		return cr, nil, fmt.Errorf("%w: client records of %d bytes", osd.ErrCorrupt, a.Size)
	}
	buf := make([]byte, a.Size)
	n, err := dev.ReadAt(ctx, clientsFID, [][]byte{buf}, 0)
	if err != nil {
		return cr, nil, fmt.Errorf("client records: read %d bytes: %w", len(buf), err)
	}
	if n != len(buf) {
		return cr, nil, fmt.Errorf("%w: client records: read %d of %d bytes", osd.ErrCorrupt, n, len(buf))
	}
	cr.len = len(buf) / slotSize
	var uuids []string
	for i := cr.len - 1; i >= 0; i-- {
		s := buf[i*slotSize : (i+1)*slotSize]
		if allZero(s) {
			cr.free = append(cr.free, i)
			continue
		}
		uuid, ok := parseSlot(s)
		if !ok {
			return cr, nil, fmt.Errorf("%w: client record %d", osd.ErrCorrupt, i)
		}
		if _, dup := cr.slots[uuid]; dup {
			return cr, nil, fmt.Errorf("%w: client %s recorded twice", osd.ErrCorrupt, uuid)
		}
		cr.slots[uuid] = i
		uuids = append(uuids, uuid)
	}
	if uuids == nil {
		uuids = []string{}
	}
	slices.Sort(uuids)
	return cr, uuids, nil
}

func allZero(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) }

// parseSlot returns the uuid of a slot in use.
func parseSlot(s []byte) (string, bool) {
	n := int(s[1])
	if s[0] != slotMagic || n == 0 || n > maxUUID || !allZero(s[2+n:]) {
		return "", false
	}
	return string(s[2 : 2+n]), true
}

// reset empties damaged records, so that the next life's are whole.
func (cr *clientRecords) reset(ctx context.Context) error {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if err := cr.commit(ctx, "reset client records", func(tx osd.Tx) error {
		return tx.SetAttr(clientsFID, osd.Attr{Valid: osd.AttrSize})
	}); err != nil {
		return err
	}
	clear(cr.slots)
	cr.free, cr.len = nil, 0
	return nil
}

// slot returns the bytes of uuid's slot.
func slot(uuid string) []byte {
	s := make([]byte, slotSize)
	s[0], s[1] = slotMagic, byte(len(uuid))
	copy(s[2:], uuid)
	return s
}

// add records uuid, durably before it returns (the target's reply to the
// client's CONNECT follows).
func (cr *clientRecords) add(ctx context.Context, uuid string) error {
	if uuid == "" || len(uuid) > maxUUID {
		return fmt.Errorf("client uuid %q: want 1 to %d bytes", uuid, maxUUID)
	}
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.off {
		return nil
	}
	if _, ok := cr.slots[uuid]; ok {
		return cr.syncLocked(ctx, uuid)
	}
	i := cr.len
	if n := len(cr.free); n > 0 {
		i = cr.free[n-1]
	}
	if err := cr.commit(ctx, "record client "+uuid, func(tx osd.Tx) error {
		if !cr.exists {
			if err := tx.Create(clientsFID, osd.Attr{}); err != nil {
				return err
			}
		}
		return tx.WriteRecord(clientsFID, slot(uuid), int64(i)*slotSize)
	}); err != nil {
		return err
	}
	cr.exists = true
	if i == cr.len {
		cr.len++
	} else {
		cr.free = cr.free[:len(cr.free)-1]
	}
	cr.slots[uuid] = i
	cr.unsynced = true
	return cr.syncLocked(ctx, uuid)
}

// syncLocked makes the records durable, if the last record made is not
// known to be.
func (cr *clientRecords) syncLocked(ctx context.Context, uuid string) error {
	if !cr.unsynced {
		return nil
	}
	if err := cr.dev.Sync(ctx); err != nil {
		return fmt.Errorf("record client %s: sync: %w", uuid, err)
	}
	cr.unsynced = false
	return nil
}

// remove forgets uuid. It need not be durable at once: a record that
// outlives a crash only makes the next recovery wait for a client that
// does not come back, until its window ends.
func (cr *clientRecords) remove(ctx context.Context, uuid string) error {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	i, ok := cr.slots[uuid]
	if !ok || cr.off {
		return nil
	}
	if err := cr.commit(ctx, "forget client "+uuid, func(tx osd.Tx) error {
		return tx.WriteRecord(clientsFID, make([]byte, slotSize), int64(i)*slotSize)
	}); err != nil {
		return err
	}
	delete(cr.slots, uuid)
	// Lowest last, so that the records stay packed at the front.
	cr.free = append(cr.free, i)
	slices.SortFunc(cr.free, func(a, b int) int { return b - a })
	return nil
}

// commit makes the steps one transaction of the device and commits it;
// what names it in errors.
func (cr *clientRecords) commit(ctx context.Context, what string, steps func(osd.Tx) error) error {
	tx, err := cr.dev.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer tx.Abort()
	if err := steps(tx); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
