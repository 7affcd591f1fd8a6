package ldlm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"

	"github.com/nacrefs/nacre/internal/errs"
)

func TestCompatibleMatrix(t *testing.T) {
	// Lustre's LCK_COMPAT_* definitions, written out row by row.
	want := map[Mode][]Mode{
		EX:    {NL},
		PW:    {NL, CR},
		PR:    {NL, CR, PR},
		CW:    {NL, CR, CW},
		CR:    {NL, CR, CW, PR, PW},
		NL:    {NL, CR, CW, PR, PW, EX, GROUP},
		GROUP: {GROUP, NL},
	}
	for _, a := range Modes {
		for _, b := range Modes {
			got, exp := Compatible(a, b), slices.Contains(want[a], b)
			if got != exp {
				t.Errorf("Compatible(%v, %v) = %v, want %v", a, b, got, exp)
			}
			if got != Compatible(b, a) {
				t.Errorf("Compatible(%v, %v) is not symmetric", a, b)
			}
		}
	}
	for _, bad := range []Mode{0, 3, 128, 255} {
		if Compatible(bad, NL) || Compatible(NL, bad) || bad.Valid() {
			t.Errorf("invalid mode %v treated as valid", bad)
		}
	}
}

func TestDowngrades(t *testing.T) {
	tests := []struct {
		from, to Mode
		ok       bool
	}{
		{EX, PW, true}, {EX, PR, true}, {EX, CW, true}, {EX, CR, true}, {EX, NL, true},
		{PW, PR, true}, {PW, CW, true}, {PW, CR, true}, {PW, NL, true}, {PW, EX, false},
		{PR, CR, true}, {PR, NL, true}, {PR, PW, false}, {PR, CW, false},
		{CW, CR, true}, {CW, PR, false}, {CW, PW, false},
		{CR, NL, true}, {CR, PR, false},
		{NL, CR, false},
		{GROUP, NL, true}, {GROUP, PR, false},
		{PR, PR, true},
	}
	for _, tt := range tests {
		if got := covers(tt.from, tt.to); got != tt.ok {
			t.Errorf("covers(%v, %v) = %v, want %v", tt.from, tt.to, got, tt.ok)
		}
	}
}

func TestErrorKindsAndErrnos(t *testing.T) {
	ns := mustNew(t, DefaultConfig())
	plain := Resource{ResID{1}, TypePlain}
	if _, err := ns.Enqueue(Request{Resource: plain, Mode: EX, Owner: "c1"}); err != nil {
		t.Fatal(err)
	}
	flock := Resource{ResID{1}, TypeFlock}
	for _, o := range []Owner{"a", "b"} {
		if _, err := ns.Enqueue(Request{Resource: flock, Mode: PW, Owner: o, Policy: Policy{Extent: Extent{0, 0}}}); err != nil && o == "a" {
			t.Fatal(err)
		}
	}
	if _, err := ns.Enqueue(Request{Resource: flock, Mode: PW, Owner: "b", Policy: Policy{Extent: Extent{1, 1}}}); err != nil {
		t.Fatal(err)
	}
	_, deadlock := ns.Enqueue(Request{Resource: flock, Mode: PW, Owner: "a", Policy: Policy{Extent: Extent{1, 1}}})

	_, invalid := ns.Enqueue(Request{Resource: plain, Mode: GROUP, Owner: "c1"})
	_, unknown := ns.Cancel(12345, "c1")
	_, notOwner := ns.Cancel(1, "c2")
	_, block := ns.Enqueue(Request{Resource: plain, Mode: PR, Owner: "c2", Flags: BlockNoWait})
	noRes := ns.SetLVB(Resource{ResID{9}, TypePlain}, LVB{})
	tests := []struct {
		err      error
		sentinel error
		kind     errs.Kind
		errno    syscall.Errno
	}{
		{invalid, ErrInvalid, errs.Invalid, syscall.EINVAL},
		{unknown, ErrUnknownHandle, errs.NotExist, syscall.ESTALE},
		{notOwner, ErrNotOwner, errs.Permission, syscall.EPERM},
		{block, ErrWouldBlock, errs.Conflict, syscall.EAGAIN},
		{deadlock, ErrDeadlock, errs.Conflict, syscall.EDEADLK},
		{noRes, ErrUnknownResource, errs.NotExist, syscall.ENOENT},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.sentinel) {
			t.Errorf("%v: not %v", tt.err, tt.sentinel)
			continue
		}
		if k := errs.KindOf(tt.err); k != tt.kind {
			t.Errorf("%v: kind %v, want %v", tt.err, k, tt.kind)
		}
		if e := Errno(tt.err); e != tt.errno {
			t.Errorf("%v: errno %v, want %v", tt.err, e, tt.errno)
		}
	}
	if Errno(nil) != 0 || Errno(errors.New("other")) != syscall.EIO {
		t.Error("Errno of nil or a foreign error")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"default", func(*Config) {}, true},
		{"no name", func(c *Config) { c.Name = "" }, false},
		{"page not a power of two", func(c *Config) { c.PageSize = 4095 }, false},
		{"page too small", func(c *Config) { c.PageSize = 256 }, false},
		{"64k pages", func(c *Config) { c.PageSize = 65536 }, true},
		{"seed 0", func(c *Config) { c.HandleSeed = 0 }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mod(&c)
			_, err := New(c)
			if (err == nil) != tt.ok {
				t.Fatalf("New: %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
		})
	}
}

func TestHandlesSkipZero(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HandleSeed = ^uint64(0) - 1
	ns := mustNew(t, cfg)
	var got []Handle
	for i := 0; i < 4; i++ {
		r, err := ns.Enqueue(Request{Resource: Resource{ResID{uint64(i)}, TypePlain}, Mode: NL, Owner: "c"})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Lock.Handle)
	}
	want := []Handle{Handle(^uint64(0) - 1), Handle(^uint64(0)), 1, 2}
	if !slices.Equal(got, want) {
		t.Fatalf("handles %v, want %v", got, want)
	}
}

func TestResID(t *testing.T) {
	id := ResIDOfFID(0x200000401, 0x2, 0x1)
	if id != (ResID{0x200000401, 0x100000002}) {
		t.Fatalf("ResIDOfFID = %v", id)
	}
	if s := id.String(); s != "[0x200000401:0x100000002:0x0].0x0" {
		t.Fatalf("String = %q", s)
	}
}

func TestFixup(t *testing.T) {
	ns := mustNew(t, DefaultConfig())
	tests := []struct {
		name       string
		mode       Mode
		req, ex    Extent
		conflicts  int
		want       Extent
		wantString string
	}{
		{name: "whole stays", mode: PW, req: Extent{0, 4095}, ex: Whole, want: Whole},
		{name: "page aligned", mode: PR, req: Extent{8192, 12287}, ex: Extent{5000, 100000}, want: Extent{8192, 98303}},
		{name: "64k aligned", mode: PR, req: Extent{65536, 131071}, ex: Extent{1, 300000}, want: Extent{65536, 262143}},
		{name: "unaligned request keeps its bounds", mode: PR, req: Extent{100, 200}, ex: Extent{50, 300}, want: Extent{100, 200}},
		{name: "unaligned request, room to align", mode: PR, req: Extent{100, 200}, ex: Extent{0, 10000}, want: Extent{0, 8191}},
		{name: "contended PW capped at 32 MiB", mode: PW, req: Extent{0, 4095}, ex: Extent{0, EOF}, conflicts: 33, want: Extent{0, 32<<20 - 1}},
		{name: "contended PR not capped", mode: PR, req: Extent{0, 4095}, ex: Extent{0, EOF}, conflicts: 33, want: Whole},
		{name: "32 conflicts not capped", mode: CW, req: Extent{0, 4095}, ex: Extent{0, EOF}, conflicts: 32, want: Whole},
		{name: "cap near EOF", mode: PW, req: Extent{EOF - 4095, EOF}, ex: Extent{0, EOF}, conflicts: 40, want: Whole},
		// Rounding a start in the last page up would wrap to 0.
		{name: "start in the last page", mode: PW, req: Extent{EOF - 50, EOF}, ex: Extent{EOF - 99, EOF}, want: Extent{EOF - 50, EOF}},
		{name: "start in the last page, request aligned", mode: PW, req: Extent{EOF - 4095, EOF}, ex: Extent{EOF - 4095, EOF}, want: Extent{EOF - 4095, EOF}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &lock{mode: tt.mode, req: tt.req}
			got := ns.fixup(l, tt.ex, tt.conflicts)
			if got != tt.want {
				t.Fatalf("fixup(%v in %v) = %v, want %v", tt.req, tt.ex, got, tt.want)
			}
			if !got.contains(tt.req) || !tt.ex.contains(got) {
				t.Fatalf("fixup %v not between %v and %v", got, tt.req, tt.ex)
			}
		})
	}
}

// TestGrowthCapContended: with more than 32 conflicting granted locks, a
// PW lock grows at most 32 MiB past its start, and not downwards.
func TestGrowthCapContended(t *testing.T) {
	ns := mustNew(t, DefaultConfig())
	res := Resource{ResID{1}, TypeExtent}
	for i := uint64(0); i < 33; i++ {
		_, err := ns.Enqueue(Request{Resource: res, Mode: PR, Owner: Owner(fmt.Sprint("r", i)),
			Policy: Policy{Extent: Extent{i * 8192, i*8192 + 4095}}, Flags: NoExpansion})
		if err != nil {
			t.Fatal(err)
		}
	}
	start := uint64(1 << 30)
	r, err := ns.Enqueue(Request{Resource: res, Mode: PW, Owner: "w", Policy: Policy{Extent: Extent{start, start + 4095}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Extent{start, start + 32<<20 - 1}); r.Lock.Policy.Extent != want || r.Lock.State != Granted {
		t.Fatalf("got %v %v, want granted %v", r.Lock.State, r.Lock.Policy.Extent, want)
	}
}

// TestGrowthNearEOF: a lock grown up to another's end in the last page of
// the offset range does not wrap around over it.
func TestGrowthNearEOF(t *testing.T) {
	ns := mustNew(t, DefaultConfig())
	res := Resource{ResID{1}, TypeExtent}
	a, err := ns.Enqueue(Request{Resource: res, Mode: PW, Owner: "a", Policy: Policy{Extent: Extent{0, EOF - 100}}, Flags: NoExpansion})
	if err != nil || a.Lock.State != Granted {
		t.Fatalf("a: %v %v", a.Lock.State, err)
	}
	b, err := ns.Enqueue(Request{Resource: res, Mode: PW, Owner: "b", Policy: Policy{Extent: Extent{EOF - 50, EOF}}})
	if err != nil || b.Lock.State != Granted {
		t.Fatalf("b: %v %v", b.Lock.State, err)
	}
	if ea, eb := a.Lock.Policy.Extent, b.Lock.Policy.Extent; eb.Start <= ea.End {
		t.Fatalf("two PW locks overlap: a %v, b %v", ea, eb)
	}
}

func TestLVBIsCopied(t *testing.T) {
	ns := mustNew(t, DefaultConfig())
	res := Resource{ResID{1}, TypeIBits}
	r, err := ns.Enqueue(Request{Resource: res, Mode: PR, Owner: "c", Policy: Policy{Bits: BitLayout}})
	if err != nil || !r.NewResource {
		t.Fatalf("enqueue: %v, new resource %v", err, r.NewResource)
	}
	buf := []byte("layout-v1")
	if err := ns.SetLVB(res, LVB{Size: 7, Opaque: buf}); err != nil {
		t.Fatal(err)
	}
	buf[0] = 'X'
	v, ok := ns.LVB(res)
	if !ok || v.Size != 7 || string(v.Opaque) != "layout-v1" {
		t.Fatalf("LVB = %+v, %v", v, ok)
	}
	v.Opaque[0] = 'Y'
	if v2, _ := ns.LVB(res); string(v2.Opaque) != "layout-v1" {
		t.Fatalf("LVB shares its buffer: %q", v2.Opaque)
	}
	r, _ = ns.Enqueue(Request{Resource: res, Mode: PR, Owner: "d", Policy: Policy{Bits: BitLayout}})
	if r.NewResource {
		t.Fatal("second enqueue reported a new resource")
	}
}

func TestBlockingNamesTheWaiter(t *testing.T) {
	ns := mustNew(t, DefaultConfig())
	res := Resource{ResID{1}, TypeIBits}
	a, _ := ns.Enqueue(Request{Resource: res, Mode: PR, Owner: "a", Policy: Policy{Bits: BitLookup | BitUpdate}})
	b, _ := ns.Enqueue(Request{Resource: res, Mode: PR, Owner: "b", Policy: Policy{Bits: BitUpdate}})
	w, err := ns.Enqueue(Request{Resource: res, Mode: EX, Owner: "w", Policy: Policy{Bits: BitUpdate}})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Blocking) != 2 {
		t.Fatalf("blocking = %+v", w.Blocking)
	}
	for i, want := range []Handle{a.Lock.Handle, b.Lock.Handle} {
		x := w.Blocking[i]
		if x.Lock.Handle != want || x.By.Handle != w.Lock.Handle || x.By.Policy.Bits != BitUpdate || !x.Lock.CallbackPending {
			t.Fatalf("blocking[%d] = %+v", i, x)
		}
	}
	// A second waiter calls nobody back.
	w2, _ := ns.Enqueue(Request{Resource: res, Mode: EX, Owner: "w2", Policy: Policy{Bits: BitLookup}})
	if w2.Blocking != nil || w2.Lock.State != Waiting {
		t.Fatalf("second waiter: %+v", w2)
	}
	if s := ns.Stats(); s.BlockingASTs != 2 {
		t.Fatalf("BlockingASTs = %d", s.BlockingASTs)
	}
}

// TestTolerate: a lock that tolerates one PR lock of a client is granted
// over it without calling it back, still waits for (and calls back) the
// client's other locks and everyone else's, and the client's later
// requests wait for it.
func TestTolerate(t *testing.T) {
	ns := mustNew(t, DefaultConfig())
	res := Resource{ResID{7}, TypeIBits}
	x, _ := ns.Enqueue(Request{Resource: res, Mode: PR, Owner: "x", Policy: Policy{Bits: BitUpdate}})
	x1, _ := ns.Enqueue(Request{Resource: res, Mode: PR, Owner: "x", Policy: Policy{Bits: BitUpdate | BitLookup}})
	y, _ := ns.Enqueue(Request{Resource: res, Mode: PR, Owner: "y", Policy: Policy{Bits: BitUpdate | BitLookup}})
	tol := Tolerated{Owner: "x", Lock: x.Lock.Handle}
	cw, err := ns.Enqueue(Request{Resource: res, Mode: CW, Owner: "local", Policy: Policy{Bits: BitUpdate}, Tolerate: tol})
	if err != nil {
		t.Fatal(err)
	}
	if cw.Lock.State != Waiting || len(cw.Blocking) != 2 || cw.Blocking[0].Lock.Handle != x1.Lock.Handle || cw.Blocking[1].Lock.Handle != y.Lock.Handle {
		t.Fatalf("tolerant CW: %+v", cw)
	}
	checkInvariants(t, ns)
	for _, l := range []struct {
		h     Handle
		owner Owner
	}{{x1.Lock.Handle, "x"}, {y.Lock.Handle, "y"}} {
		if _, err := ns.Cancel(l.h, l.owner); err != nil {
			t.Fatal(err)
		}
	}
	if l, err := ns.Lookup(cw.Lock.Handle); err != nil || l.State != Granted {
		t.Fatalf("the CW once the others went: %+v %v", l, err)
	}
	if l, err := ns.Lookup(x.Lock.Handle); err != nil || l.State != Granted || l.CallbackPending {
		t.Fatalf("the tolerated lock: %+v %v", l, err)
	}
	checkInvariants(t, ns)
	// x's next lock waits for the CW like anyone's.
	x2, _ := ns.Enqueue(Request{Resource: res, Mode: PR, Owner: "x", Policy: Policy{Bits: BitUpdate}})
	if x2.Lock.State != Waiting {
		t.Fatalf("x's second PR: %+v", x2)
	}
	checkInvariants(t, ns)
	if eff, err := ns.Cancel(cw.Lock.Handle, "local"); err != nil || len(eff.Granted) != 1 || eff.Granted[0].Handle != x2.Lock.Handle {
		t.Fatalf("cancel of the CW: %+v %v", eff, err)
	}
	// A tolerated lock waiting ahead is waited for: only a granted one
	// is tolerated.
	res3 := Resource{ResID{9}, TypeIBits}
	ex, _ := ns.Enqueue(Request{Resource: res3, Mode: EX, Owner: "z", Policy: Policy{Bits: BitUpdate}})
	xw, _ := ns.Enqueue(Request{Resource: res3, Mode: PR, Owner: "x", Policy: Policy{Bits: BitUpdate}})
	cw3, _ := ns.Enqueue(Request{Resource: res3, Mode: CW, Owner: "local", Policy: Policy{Bits: BitUpdate}, Tolerate: Tolerated{Owner: "x", Lock: xw.Lock.Handle}})
	if xw.Lock.State != Waiting || cw3.Lock.State != Waiting {
		t.Fatalf("behind an EX: %+v %+v", xw, cw3)
	}
	// Once x's PR is granted, the CW tolerates it.
	if eff, err := ns.Cancel(ex.Lock.Handle, "z"); err != nil || len(eff.Granted) != 2 || eff.Granted[0].Handle != xw.Lock.Handle ||
		eff.Granted[1].Handle != cw3.Lock.Handle || eff.Granted[0].CallbackPending {
		t.Fatalf("cancel of the EX: %+v %v", eff, err)
	}
	checkInvariants(t, ns)
	// Only PR locks are tolerated, and only of the owner named.
	res2 := Resource{ResID{8}, TypeIBits}
	pw, _ := ns.Enqueue(Request{Resource: res2, Mode: PW, Owner: "x", Policy: Policy{Bits: BitUpdate}})
	cw2, _ := ns.Enqueue(Request{Resource: res2, Mode: CW, Owner: "local", Policy: Policy{Bits: BitUpdate}, Tolerate: Tolerated{Owner: "x", Lock: pw.Lock.Handle}})
	if cw2.Lock.State != Waiting || len(cw2.Blocking) != 1 || cw2.Blocking[0].Lock.Handle != pw.Lock.Handle {
		t.Fatalf("tolerant CW over x's PW: %+v", cw2)
	}
	res4 := Resource{ResID{10}, TypeIBits}
	yr, _ := ns.Enqueue(Request{Resource: res4, Mode: PR, Owner: "y", Policy: Policy{Bits: BitUpdate}})
	cw4, _ := ns.Enqueue(Request{Resource: res4, Mode: CW, Owner: "local", Policy: Policy{Bits: BitUpdate}, Tolerate: Tolerated{Owner: "x", Lock: yr.Lock.Handle}})
	if cw4.Lock.State != Waiting {
		t.Fatalf("a CW tolerating y's lock in x's name: %+v", cw4)
	}
	for _, bad := range []Request{
		{Resource: Resource{ResID{7}, TypeExtent}, Mode: PW, Owner: "local", Policy: Policy{Extent: Whole}, Tolerate: tol},
		{Resource: res, Mode: CW, Owner: "x", Policy: Policy{Bits: BitUpdate}, Tolerate: tol},
		{Resource: res, Mode: CW, Owner: "local", Policy: Policy{Bits: BitUpdate}, Tolerate: Tolerated{Owner: "x"}},
	} {
		if _, err := ns.Enqueue(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("enqueue %+v: %v", bad, err)
		}
	}
}

// TestRandomOperations drives every operation at random on a few
// resources of every type, checks the namespace's invariants after each
// call and the consistency of what each call returned, then cancels
// everything and expects an empty namespace.
func TestRandomOperations(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			ns := mustNew(t, DefaultConfig())
			owners := []Owner{"a", "b", "c", "d"}
			types := []Type{TypePlain, TypeExtent, TypeFlock, TypeIBits}
			for step := 0; step < 400; step++ {
				var eff Effects
				switch op := rng.IntN(10); {
				case op < 6:
					req := randomRequest(rng, owners, types)
					if req.Resource.Type == TypeIBits && rng.IntN(3) == 0 {
						// A target's lock that tolerates a PR lock on its
						// resource (an MDT create's, Request.Tolerate), or
						// now and then any lock.
						var prs []Handle
						for h, l := range ns.locks {
							if l.name == req.Resource && l.granted && l.mode == PR {
								prs = append(prs, h)
							}
						}
						slices.Sort(prs)
						if len(prs) > 0 && rng.IntN(4) != 0 {
							h := prs[rng.IntN(len(prs))]
							req.Owner, req.Tolerate = "local", Tolerated{Owner: ns.locks[h].owner, Lock: h}
						} else if h, l := randomLock(rng, ns); l != nil {
							req.Owner, req.Tolerate = "local", Tolerated{Owner: l.owner, Lock: h}
						}
					}
					r, err := ns.Enqueue(req)
					if err != nil {
						if !errors.Is(err, ErrWouldBlock) && !errors.Is(err, ErrDeadlock) && !errors.Is(err, ErrInvalid) {
							t.Fatalf("enqueue %+v: %v", req, err)
						}
						break
					}
					eff = r.Effects
					for _, b := range r.Blocking {
						if b.By.Handle != r.Lock.Handle {
							t.Fatalf("blocking AST for %v names %v", r.Lock.Handle, b.By.Handle)
						}
					}
				case op < 8:
					h, l := randomLock(rng, ns)
					if l == nil {
						break
					}
					var err error
					eff, err = ns.Cancel(h, l.owner)
					if err != nil {
						t.Fatal(err)
					}
				case op < 9:
					h, l := randomLock(rng, ns)
					if l == nil || !l.granted || l.name.Type == TypeFlock {
						break
					}
					c := Conversion{Mode: Modes[rng.IntN(6)]}
					if l.name.Type == TypeIBits && rng.IntN(2) == 0 {
						c = Conversion{Bits: l.pol.Bits & Bits(rng.IntN(8))}
					}
					r, err := ns.Convert(h, l.owner, c)
					if err != nil {
						if !errors.Is(err, ErrInvalid) {
							t.Fatal(err)
						}
						break
					}
					eff = r.Effects
				default:
					eff = ns.DropOwner(owners[rng.IntN(len(owners))])
				}
				checkInvariants(t, ns)
				checkEffects(t, ns, eff)
			}
			// Cancel granted locks until nothing is left: every waiter
			// must eventually be granted (or, for FLOCK, fail).
			for i := 0; len(ns.locks) > 0; i++ {
				if i > 10000 {
					t.Fatalf("namespace does not drain: %d locks", len(ns.locks))
				}
				var hs []Handle
				for h, l := range ns.locks {
					if l.granted {
						hs = append(hs, h)
					}
				}
				if len(hs) == 0 {
					t.Fatalf("only waiting locks left: %d", len(ns.locks))
				}
				slices.Sort(hs)
				eff, err := ns.Cancel(hs[0], ns.locks[hs[0]].owner)
				if err != nil {
					t.Fatal(err)
				}
				checkInvariants(t, ns)
				checkEffects(t, ns, eff)
			}
			if s := ns.Stats(); s.Resources != 0 || s.Granted != 0 || s.Waiting != 0 || len(ns.flockWaiting) != 0 {
				t.Fatalf("not empty after draining: %+v", s)
			}
		})
	}
}

func randomRequest(rng *rand.Rand, owners []Owner, types []Type) Request {
	t := types[rng.IntN(len(types))]
	req := Request{
		Resource: Resource{ResID{uint64(rng.IntN(2))}, t},
		Owner:    owners[rng.IntN(len(owners))],
	}
	for {
		req.Mode = Modes[rng.IntN(len(Modes))]
		if validModeFor(t, req.Mode) {
			break
		}
	}
	pages := func() Extent {
		s := uint64(rng.IntN(8)) * 4096
		e := s + uint64(rng.IntN(4)+1)*4096 - 1
		if rng.IntN(6) == 0 {
			e = EOF
		}
		return Extent{s, e}
	}
	switch t {
	case TypeExtent:
		req.Policy.Extent = pages()
		if req.Mode == GROUP {
			req.Policy.GID = uint64(rng.IntN(2) + 1)
		}
		if rng.IntN(4) == 0 {
			req.Flags |= NoExpansion
		}
	case TypeFlock:
		s := uint64(rng.IntN(16))
		req.Policy.Extent = Extent{s, s + uint64(rng.IntN(8))}
		req.Policy.FlockOwner = uint64(rng.IntN(2))
	case TypeIBits:
		req.Policy.Bits = Bits(rng.IntN(7) + 1)
	}
	if rng.IntN(5) == 0 {
		req.Flags |= BlockNoWait
	}
	return req
}

func randomLock(rng *rand.Rand, ns *Namespace) (Handle, *lock) {
	if len(ns.locks) == 0 {
		return 0, nil
	}
	hs := make([]Handle, 0, len(ns.locks))
	for h := range ns.locks {
		hs = append(hs, h)
	}
	slices.Sort(hs)
	h := hs[rng.IntN(len(hs))]
	return h, ns.locks[h]
}

// checkEffects checks what a call returned against the namespace after
// it: blocked locks granted and marked, grants granted (unless removed
// later in the same call), removed and failed locks gone.
func checkEffects(t *testing.T, ns *Namespace, e Effects) {
	t.Helper()
	for _, b := range e.Blocking {
		l := ns.locks[b.Lock.Handle]
		if l == nil || !l.granted || !l.cbPending || b.Lock.Resource.Type == TypeFlock || b.Lock.Mode == GROUP {
			t.Fatalf("blocking AST for %+v", b.Lock)
		}
	}
	for _, g := range e.Granted {
		if slices.Contains(e.Removed, g.Handle) {
			continue
		}
		l := ns.locks[g.Handle]
		if l == nil || !l.granted || g.State != Granted {
			t.Fatalf("granted %+v is not granted", g)
		}
	}
	for _, h := range e.Removed {
		if ns.locks[h] != nil {
			t.Fatalf("removed h%d still there", h)
		}
	}
	for _, f := range e.Failed {
		if ns.locks[f.Lock.Handle] != nil || !errors.Is(f.Err, ErrDeadlock) {
			t.Fatalf("failed %+v: %v", f.Lock, f.Err)
		}
	}
}

// TestFlockModel checks FLOCK merging and splitting against a byte map:
// for each owner, the mode it holds on each byte of a small file.
func TestFlockModel(t *testing.T) {
	const size = 48
	type key = flockKey
	for seed := uint64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		ns := mustNew(t, DefaultConfig())
		res := Resource{ResID{1}, TypeFlock}
		model := map[key]*[size]Mode{}
		apply := func(k key, e Extent, m Mode) {
			if model[k] == nil {
				model[k] = new([size]Mode)
			}
			for i := e.Start; i <= e.End; i++ {
				model[k][i] = 0
				if m != NL {
					model[k][i] = m
				}
			}
		}
		pending := map[Handle]Request{}
		for step := 0; step < 300; step++ {
			owner := Owner([]string{"x", "y", "z"}[rng.IntN(3)])
			k := key{owner, uint64(rng.IntN(2))}
			s := uint64(rng.IntN(size))
			e := min(s+uint64(rng.IntN(12)), size-1)
			mode := []Mode{PR, PW, NL}[rng.IntN(3)]
			var eff Effects
			if rng.IntN(6) == 0 && len(ns.locks) > 0 {
				h, l := randomLock(rng, ns)
				if l.granted {
					apply(l.flockKey(), l.pol.Extent, NL)
				} else {
					delete(pending, h)
				}
				eff, _ = ns.Cancel(h, l.owner)
			} else {
				req := Request{Resource: res, Mode: mode, Owner: owner, Policy: Policy{Extent: Extent{s, e}, FlockOwner: k.fowner}}
				if rng.IntN(3) == 0 {
					req.Flags = BlockNoWait
				}
				r, err := ns.Enqueue(req)
				if err != nil {
					continue
				}
				if r.Lock.State == Granted {
					apply(k, req.Policy.Extent, mode)
				} else {
					pending[r.Lock.Handle] = req
				}
				eff = r.Effects
			}
			for _, g := range eff.Granted {
				req := pending[g.Handle]
				delete(pending, g.Handle)
				apply(flockKey{req.Owner, req.Policy.FlockOwner}, req.Policy.Extent, req.Mode)
			}
			for _, f := range eff.Failed {
				delete(pending, f.Lock.Handle)
			}
			checkInvariants(t, ns)
			// Compare the namespace's granted locks with the model.
			got := map[key]*[size]Mode{}
			for _, l := range ns.Locks(res) {
				if l.State != Granted {
					continue
				}
				gk := key{l.Owner, l.Policy.FlockOwner}
				if got[gk] == nil {
					got[gk] = new([size]Mode)
				}
				for i := l.Policy.Extent.Start; i <= l.Policy.Extent.End; i++ {
					got[gk][i] = l.Mode
				}
			}
			for k, want := range model {
				g := got[k]
				if g == nil {
					g = new([size]Mode)
				}
				if *g != *want {
					t.Fatalf("seed %d step %d: owner %v holds %v, model %v", seed, step, k, g, want)
				}
			}
			for k := range got {
				if model[k] == nil {
					t.Fatalf("seed %d step %d: owner %v holds locks the model does not", seed, step, k)
				}
			}
		}
	}
}
