package mdt

import (
	"context"
	"sync"
	"time"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/mds/mdd"
)

// The destroy log worker (Lustre's OSP sync thread): the objects of files
// whose last link and last open went are named by destroy log records,
// written by the store in the same batch as the removal. The worker
// destroys them on their OSTs once the removal is committed (an object
// must never go before the file does, or a crash could bring back a file
// without its data: it waits for the MDT's next commit rather than forcing
// one, so that a storm of unlinks does not become a storm of syncs), makes
// the destroys durable on the OSTs (OST_SYNC), and only then drops the
// records. Records survive restarts, so objects of files removed before a
// crash are destroyed after it.

// destroyBatch is how many records one round takes.
const destroyBatch = 256

// destroyRetry is how often the worker looks at the log without being
// woken (records that failed wait for it).
const destroyRetry = 5 * time.Second

func (m *MDT) kickDestroy() {
	select {
	case m.destroyKick <- struct{}{}:
	default:
	}
}

func (m *MDT) destroyer() {
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-m.stop
		cancel()
	}()
	// Objects can only be destroyed on OSTs the MDT knows.
	select {
	case <-m.ostsKnown:
	case <-m.stop:
		return
	}
	t := time.NewTicker(destroyRetry)
	defer t.Stop()
	for {
		// Every record is tried once per round, from the start of the
		// log: records that failed stay for the next round.
		after := uint64(0)
		for {
			recs, err := m.store.PendingDestroys(after, destroyBatch)
			if err != nil {
				m.log.Error("mdt: destroy log", "err", err)
				break
			}
			if len(recs) == 0 {
				break
			}
			m.destroyRecords(base, recs)
			after = recs[len(recs)-1].ID
			if base.Err() != nil {
				return
			}
		}
		select {
		case <-m.stop:
			return
		case <-m.destroyKick:
		case <-t.C:
		}
	}
}

// destroyRecords destroys the objects of recs, OSTs in parallel, and drops
// the records whose objects are all gone.
func (m *MDT) destroyRecords(base context.Context, recs []mdd.DestroyRecord) {
	if !m.waitCommitted(base, m.tgt.LastTransno()) {
		return
	}
	byOST := map[uint32][]fid.FID{}
	for _, r := range recs {
		for _, c := range r.Layout.Components {
			for _, o := range c.Objects {
				byOST[o.OSTIndex] = append(byOST[o.OSTIndex], o.Object)
			}
		}
	}
	ctx, cancel := context.WithTimeout(base, m.cfg.OSTTimeout)
	defer cancel()
	var mu sync.Mutex
	failed := map[uint32]bool{}
	var wg sync.WaitGroup
	for idx, objs := range byOST {
		p := m.ospOf(idx)
		if p == nil {
			mu.Lock() // (the goroutines of OSTs before it write failed too)
			failed[idx] = true
			mu.Unlock()
			m.log.Warn("mdt: destroy log names objects on an unknown OST", "ost", idx, "objects", len(objs))
			continue
		}
		wg.Go(func() {
			if err := p.destroy(ctx, objs); err != nil {
				m.log.Info("mdt: destroy objects", "ost", p.ost.Name, "objects", len(objs), "err", err)
				mu.Lock()
				failed[idx] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, r := range recs {
		ok, n := true, 0
		for _, c := range r.Layout.Components {
			for _, o := range c.Objects {
				ok = ok && !failed[o.OSTIndex]
				n++
			}
		}
		if !ok {
			continue
		}
		if err := m.store.DestroyDone(r.ID); err != nil {
			m.log.Error("mdt: destroy log", "record", r.ID, "err", err)
			continue
		}
		m.destroyed.Add(uint64(n))
	}
}

// waitCommitted waits until every change numbered up to transno is
// committed (the committer's next round), or ctx ends.
func (m *MDT) waitCommitted(ctx context.Context, transno uint64) bool {
	for m.tgt.LastCommitted() < transno {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	return true
}
