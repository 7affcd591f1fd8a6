package mdt

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/internal/layout"
	"github.com/nacrefs/nacre/mds/mdd"
)

// The layout side of the MDT (Lustre's LOD): which layout a new file gets
// and which OSTs its objects go to.

// qosThreshold is the free-space imbalance, in percent of the freest
// OST, past which the allocator weighs OSTs by free space instead of
// going round robin (Lustre's qos_threshold_rr, 17%).
const qosThreshold = 17

// OSTUp has the MDT's connection to OST idx check itself now: the MGS
// says the OST has (re)started (Lustre's imperative recovery, which the
// MDT's OSP devices get as clients do). If it restarted, the connection
// reconnects and replays at once instead of at its next ping or statfs,
// which the OST's recovery would wait for while holding every client.
func (m *MDT) OSTUp(idx uint32) {
	m.ospMu.Lock()
	p := m.osps[idx]
	m.ospMu.Unlock()
	if p != nil {
		p.imp.PingNow()
	}
}

// SetOSTs makes osts the MDT's OST list (from its configuration, later
// from the MGS's): new OSTs get an import and a pool, known ones their
// servers, OSTs that left stop getting objects (their imports stay for
// destroys). Safe for concurrent
// use.
func (m *MDT) SetOSTs(osts []OST) error {
	m.ospMu.Lock()
	defer m.ospMu.Unlock()
	defer m.ostsKnownOnce.Do(func() { close(m.ostsKnown) })
	keep := map[uint32]bool{}
	var errs []error
	for _, o := range osts {
		if o.Index > layout.MaxOSTIndex || o.Name == "" || len(o.Servers) == 0 {
			errs = append(errs, fmt.Errorf("mdt: OST %+v: want an index up to %d, a name and a server", o, layout.MaxOSTIndex))
			continue
		}
		keep[o.Index] = true
		if p := m.osps[o.Index]; p != nil {
			p.setActive(true)
			// Its servers as the configuration says now (a failover
			// node added, a server's NIDs changed).
			if err := p.imp.SetServers(o.Servers); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		p, err := newOSP(m, o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		m.osps[o.Index] = p
	}
	for idx, p := range m.osps {
		if !keep[idx] {
			p.setActive(false)
		}
	}
	return errors.Join(errs...)
}

// SetPools sets the OST pools (name → OST indexes) layouts may name.
func (m *MDT) SetPools(pools map[string][]uint32) {
	m.ospMu.Lock()
	defer m.ospMu.Unlock()
	m.pools = make(map[string][]uint32, len(pools))
	for n, idx := range pools {
		m.pools[n] = slices.Clone(idx)
	}
}

// activeOSPs returns the OSTs that get objects, by index, restricted to
// pool if it names OSTs (an unknown or empty pool means every OST, as
// Lustre falls back).
func (m *MDT) activeOSPs(pool string) []*osp {
	m.ospMu.Lock()
	defer m.ospMu.Unlock()
	var members map[uint32]bool
	if idx := m.pools[pool]; pool != "" && len(idx) > 0 {
		members = map[uint32]bool{}
		for _, i := range idx {
			members[i] = true
		}
	}
	var out []*osp
	for idx, p := range m.osps {
		p.mu.Lock()
		active := p.mu.active
		p.mu.Unlock()
		if active && (members == nil || members[idx]) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *osp) int { return int(a.ost.Index) - int(b.ost.Index) })
	return out
}

// awaitOSTs waits, at most AllocTimeout, until the MDT has been told its
// OST list (see Config.AwaitOSTs).
func (m *MDT) awaitOSTs(ctx context.Context) error {
	select {
	case <-m.ostsKnown:
		return nil
	default:
	}
	t := time.NewTimer(m.cfg.AllocTimeout)
	defer t.Stop()
	select {
	case <-m.ostsKnown:
		return nil
	case <-t.C:
		return fmt.Errorf("mdt: the OST list did not arrive within %v: %w", m.cfg.AllocTimeout, syscall.ENOSPC)
	case <-ctx.Done():
		return fmt.Errorf("mdt: waiting for the OST list: %w", ctx.Err())
	}
}

// hasOSTs reports whether the MDT knows any OST at all.
func (m *MDT) hasOSTs() bool {
	m.ospMu.Lock()
	defer m.ospMu.Unlock()
	return len(m.osps) > 0
}

// ospOf returns the proxy of OST idx, nil if unknown.
func (m *MDT) ospOf(idx uint32) *osp {
	m.ospMu.Lock()
	defer m.ospMu.Unlock()
	return m.osps[idx]
}

// defaultLayout is the layout template a new regular file in parent gets:
// parent's default layout, else the root's, else the file system's.
func (m *MDT) defaultLayout(parent fid.FID) layout.Layout {
	if l, _ := m.store.DefaultLayout(parent, mdd.RootFID); l != nil {
		return *l
	}
	return layout.Plain(m.DefaultStripe())
}

// DefaultStripe returns the file system's default striping (lod.*.stripesize,
// stripecount, stripeoffset), for files in directories without a default
// layout of their own or of the root's.
func (m *MDT) DefaultStripe() layout.RAID0 {
	return *m.defStripe.Load()
}

// SetDefaultStripe changes the file system's default striping for files
// created from now on; a striping that is not valid is refused and changes
// nothing.
func (m *MDT) SetDefaultStripe(r layout.RAID0) error {
	if r.Objects != nil || r.Pool != "" {
		return fmt.Errorf("mdt: default striping: %w: no objects or pool", syscall.EINVAL)
	}
	if err := layout.Plain(r).Validate(); err != nil {
		return fmt.Errorf("mdt: default striping: %w", err)
	}
	m.defStripe.Store(&r)
	return nil
}

// plan is a new file's objects: one reserved object on each OST chosen
// for its first component, released unless taken.
type plan struct {
	tmpl  layout.Layout
	comp  int // the component instantiated
	osps  []*osp
	taken bool
	out   layout.Layout // the layout built by alloc
}

// allocate chooses the OSTs of tmpl's first component and reserves an
// object on each, waiting at most AllocTimeout for empty pools. A nil
// plan means the file gets no objects (no OST is configured, or tmpl's
// first component is past offset 0).
func (m *MDT) allocate(ctx context.Context, tmpl layout.Layout) (*plan, error) {
	if err := m.awaitOSTs(ctx); err != nil {
		return nil, err
	}
	if !m.hasOSTs() || len(tmpl.Components) == 0 || tmpl.Components[0].Start != 0 {
		return nil, nil
	}
	return m.allocateComp(ctx, tmpl, 0)
}

// allocateComp is allocate for component comp of tmpl.
func (m *MDT) allocateComp(ctx context.Context, tmpl layout.Layout, comp int) (*plan, error) {
	if err := m.awaitOSTs(ctx); err != nil {
		return nil, err
	}
	r := tmpl.Components[comp].RAID0
	cands := m.activeOSPs(r.Pool)
	n := len(cands)
	if n == 0 {
		return nil, fmt.Errorf("mdt: no active OST for a new file: %w", syscall.ENOSPC)
	}
	c := int(r.StripeCount)
	if c == layout.AllStripes || c > n {
		c = n
	}
	// OSTs out of reach get no objects while others can take them: a
	// count past the OSTs in reach is cut to them, as Lustre's
	// lod_get_stripecnt cuts it to the active targets (a file over every
	// OST, -1, is over those in reach). With none in reach the create
	// waits for them as for empty pools.
	if slices.ContainsFunc(cands, (*osp).isDown) {
		if up := slices.DeleteFunc(slices.Clone(cands), (*osp).isDown); len(up) > 0 {
			cands, n, c = up, len(up), min(c, len(up))
		}
	}
	order := m.orderOSTs(cands, r.StripeOffset)
	if r.StripeOffset == layout.AnyOffset {
		// Prefer healthy OSTs (a degraded or read-only one takes new
		// objects only when too few others are left, as Lustre's
		// allocator does), then OSTs with objects at hand: a create waits
		// for an OST only when too few have any.
		rank := make(map[*osp]int, len(order))
		for _, o := range order {
			if o.isDegraded() {
				rank[o] += 2
			}
			if o.avail() == 0 {
				rank[o]++
			}
		}
		slices.SortStableFunc(order, func(a, b *osp) int { return rank[a] - rank[b] })
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.AllocTimeout)
	defer cancel()
	p := &plan{tmpl: tmpl.Clone(), comp: comp}
	for _, o := range order[:c] {
		if err := o.reserve(ctx); err != nil {
			p.release()
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("no object on %s within %v: %w", o.ost.Name, m.cfg.AllocTimeout, syscall.ENOSPC)
			}
			return nil, fmt.Errorf("mdt: allocate objects: %w", err)
		}
		p.osps = append(p.osps, o)
	}
	return p, nil
}

// orderOSTs puts the candidates in the order stripes go to them: from the
// given offset on, by index; otherwise round robin when free space is
// balanced, weighted by free space (without replacement) when it is not.
func (m *MDT) orderOSTs(cands []*osp, offset int32) []*osp {
	n := len(cands)
	order := make([]*osp, 0, n)
	if offset >= 0 {
		start := slices.IndexFunc(cands, func(o *osp) bool { return o.ost.Index >= uint32(offset) })
		if start < 0 {
			start = 0
		}
		for i := range n {
			order = append(order, cands[(start+i)%n])
		}
		return order
	}
	free := make([]uint64, n)
	var lo, hi uint64
	known := true
	for i, o := range cands {
		f, ok := o.freeSpace()
		known = known && ok
		free[i] = f
		if i == 0 || f < lo {
			lo = f
		}
		hi = max(hi, f)
	}
	if !known || hi == 0 || (hi-lo)*100/hi <= qosThreshold {
		start := int(m.rr.Add(1) % uint64(n))
		for i := range n {
			order = append(order, cands[(start+i)%n])
		}
		return order
	}
	// Weighted random order by free space (Lustre's QoS allocator).
	left := slices.Clone(cands)
	w := slices.Clone(free)
	for len(left) > 0 {
		var total float64
		for _, x := range w {
			total += float64(x) + 1
		}
		pick, acc := rand.Float64()*total, 0.0
		i := 0
		for ; i < len(left)-1; i++ {
			acc += float64(w[i]) + 1
			if pick < acc {
				break
			}
		}
		order = append(order, left[i])
		left = slices.Delete(left, i, i+1)
		w = slices.Delete(w, i, i+1)
	}
	return order
}

// release gives back the reservations of a plan whose create did not
// take them.
func (p *plan) release() {
	if p == nil || p.taken {
		return
	}
	for _, o := range p.osps {
		o.unreserve()
	}
	p.osps = nil
}

// alloc takes the reserved objects and builds the layout; it runs with
// the store's lock held (mdd.Spec.Alloc).
func (p *plan) alloc() (layout.Layout, error) {
	if p.taken {
		return layout.Layout{}, fmt.Errorf("mdt: plan used twice: %w", syscall.EIO)
	}
	l, err := p.fill(p.tmpl)
	p.out = l
	return l, err
}

// fill takes the reserved objects into component p.comp of a copy of l.
func (p *plan) fill(l layout.Layout) (layout.Layout, error) {
	l = l.Clone()
	if p.comp >= len(l.Components) || l.Components[p.comp].Instantiated() {
		// Nothing taken: release gives the reservations back (taken
		// already, they were held for good, and the orphan cleanup,
		// which waits for reservations to end, never ran again).
		return layout.Layout{}, fmt.Errorf("mdt: component %d changed meanwhile: %w", p.comp, syscall.EAGAIN)
	}
	p.taken = true
	c := &l.Components[p.comp]
	c.Objects = make([]layout.Object, len(p.osps))
	for i, o := range p.osps {
		c.Objects[i] = layout.Object{OSTIndex: o.ost.Index, Object: o.take()}
	}
	c.StripeCount = int32(len(p.osps))
	if !l.Composite {
		c.StripeOffset = int32(p.osps[0].ost.Index)
	}
	return l, nil
}

// ReadyOSTs returns how many OSTs have objects precreated for new files
// now (a create striped over them waits for none).
func (m *MDT) ReadyOSTs() int {
	m.ospMu.Lock()
	osps := make([]*osp, 0, len(m.osps))
	for _, p := range m.osps {
		osps = append(osps, p)
	}
	m.ospMu.Unlock()
	n := 0
	for _, p := range osps {
		if p.avail() > 0 {
			n++
		}
	}
	return n
}
