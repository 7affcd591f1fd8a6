package osc

import (
	"slices"
	"testing"
)

// TestRewriteSendsEachPageOnce: the rewrite of an unstable write goes out
// in RPCs of up to max_pages_per_rpc with each page in one of them: the
// pages of a full RPC in one, more (max_pages_per_rpc lowered since) in
// full RPCs and the rest. A page put again at the head of the next RPC
// once one is full would go out twice, the second time after the first
// RPC let it go idle, open to a writer: its bytes would not be those its
// sum, joined into the RPC's checksum, was taken of.
func TestRewriteSendsEachPageOnce(t *testing.T) {
	c := &Client{}
	c.tun.rpcPages.Store(2)
	for _, tc := range []struct {
		pages int
		want  []int // pages of each RPC
	}{{2, []int{2}}, {5, []int{2, 2, 1}}} {
		o := &Object{c: c}
		e := unstableRPC{transno: 7, obj: o}
		for i := range uint64(tc.pages) {
			p := &page{obj: o, idx: i, data: make([]byte, PageSize), valid: wholePage, sent: wholePage, unstable: e.transno}
			o.mu.pages.set(i, p)
			e.pages = append(e.pages, p)
		}
		o.mu.Lock()
		rpcs, _ := c.rewriteRPCsLocked(e)
		o.mu.Unlock()
		var shape []int
		times := map[*page]int{}
		for _, r := range rpcs {
			shape = append(shape, len(r.segs))
			for _, s := range r.segs {
				times[s.p]++
			}
		}
		if !slices.Equal(shape, tc.want) {
			t.Errorf("%d pages: rewrite RPCs of %v pages, want %v", tc.pages, shape, tc.want)
		}
		for _, p := range e.pages {
			if times[p] != 1 {
				t.Errorf("%d pages: page %d in %d rewrite RPCs, want 1", tc.pages, p.idx, times[p])
			}
		}
		if o.mu.writeback != tc.pages {
			t.Errorf("%d pages: %d in writeback, want %d", tc.pages, o.mu.writeback, tc.pages)
		}
	}
}
