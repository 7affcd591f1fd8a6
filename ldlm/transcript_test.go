package ldlm

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/nacrefs/nacre/internal/errs"
)

// TestTranscripts runs the lock transcripts in testdata. Each file starts
// with an empty namespace (seed 1, so handle N prints as hN). Commands:
//
//	ns [seed=N] [page=N]                     start over with a new namespace
//	enqueue owner=O res=N type=T mode=M [start=N] [end=N|EOF] [gid=N]
//	        [bits=A|B] [fowner=N] [pid=N] [nowait] [noexp]
//	test    (same arguments as enqueue)      first conflicting granted lock
//	cancel owner=O h=N
//	convert owner=O h=N [mode=M] [bits=A|B]
//	lookup h=N
//	drop owner=O                             evict an owner
//	locks [res=N type=T]                     one resource, or all
//	lvb res=N type=T [size=N blocks=N mtime=N atime=N ctime=N]
//	stats
//	matrix type=T                            the mode matrix, by enqueueing
//
// After every command the namespace's invariants are checked.
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		ns := mustNew(t, DefaultConfig())
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out := runCommand(t, &ns, d)
			checkInvariants(t, ns)
			return out
		})
	})
}

func mustNew(t testing.TB, cfg Config) *Namespace {
	t.Helper()
	ns, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func runCommand(t *testing.T, nsp **Namespace, d *datadriven.TestData) string {
	ns := *nsp
	var b strings.Builder
	switch d.Cmd {
	case "ns":
		cfg := DefaultConfig()
		cfg.HandleSeed = uintArg(t, d, "seed", 1)
		cfg.PageSize = uintArg(t, d, "page", 4096)
		*nsp = mustNew(t, cfg)
		return "ok"
	case "enqueue":
		r, err := ns.Enqueue(requestArgs(t, d))
		if err != nil {
			return fmtErr(err)
		}
		if r.Lock.Handle == 0 {
			b.WriteString("unlocked " + fmtPolicy(r.Lock) + "\n")
		} else {
			fmt.Fprintf(&b, "%s %s\n", r.Lock.State, fmtLock(r.Lock))
		}
		if r.NoTimeout {
			b.WriteString("no timeout\n")
		}
		writeEffects(&b, r.Effects)
	case "test":
		l, found, err := ns.Test(requestArgs(t, d))
		switch {
		case err != nil:
			return fmtErr(err)
		case found:
			return "conflicts with " + fmtLock(l)
		default:
			return "no conflict"
		}
	case "cancel":
		eff, err := ns.Cancel(handleArg(t, d), Owner(strArg(t, d, "owner")))
		if err != nil {
			return fmtErr(err)
		}
		b.WriteString("cancelled\n")
		writeEffects(&b, eff)
	case "convert":
		var c Conversion
		if d.HasArg("mode") {
			c.Mode = parseMode(t, strArg(t, d, "mode"))
		}
		if d.HasArg("bits") {
			c.Bits = parseBits(t, strArg(t, d, "bits"))
		}
		r, err := ns.Convert(handleArg(t, d), Owner(strArg(t, d, "owner")), c)
		if err != nil {
			return fmtErr(err)
		}
		fmt.Fprintf(&b, "converted %s\n", fmtLock(r.Lock))
		writeEffects(&b, r.Effects)
	case "lookup":
		l, err := ns.Lookup(handleArg(t, d))
		if err != nil {
			return fmtErr(err)
		}
		return fmt.Sprintf("%s %s", l.State, fmtLock(l))
	case "drop":
		eff := ns.DropOwner(Owner(strArg(t, d, "owner")))
		b.WriteString("dropped\n")
		writeEffects(&b, eff)
	case "locks":
		resources := ns.Resources()
		if d.HasArg("res") {
			resources = []Resource{resourceArg(t, d)}
		}
		if len(resources) == 0 {
			return "no resources"
		}
		for _, res := range resources {
			writeResource(&b, ns, res)
		}
	case "lvb":
		res := resourceArg(t, d)
		if d.HasArg("size") {
			v := LVB{
				Size:   uintArg(t, d, "size", 0),
				Blocks: uintArg(t, d, "blocks", 0),
				MTime:  int64(uintArg(t, d, "mtime", 0)),
				ATime:  int64(uintArg(t, d, "atime", 0)),
				CTime:  int64(uintArg(t, d, "ctime", 0)),
			}
			if err := ns.SetLVB(res, v); err != nil {
				return fmtErr(err)
			}
		}
		v, ok := ns.LVB(res)
		if !ok {
			return "no resource"
		}
		return fmt.Sprintf("size=%d blocks=%d mtime=%d atime=%d ctime=%d", v.Size, v.Blocks, v.MTime, v.ATime, v.CTime)
	case "stats":
		s := ns.Stats()
		fmt.Fprintf(&b, "resources=%d granted=%d waiting=%d\n", s.Resources, s.Granted, s.Waiting)
		fmt.Fprintf(&b, "enqueues=%d cancels=%d converts=%d\n", s.Enqueues, s.Cancels, s.Converts)
		fmt.Fprintf(&b, "blocking_asts=%d completion_asts=%d aborted=%d deadlocks=%d evicted=%d\n",
			s.BlockingASTs, s.CompletionASTs, s.Aborted, s.Deadlocks, s.Evicted)
	case "matrix":
		return modeMatrix(t, parseType(t, strArg(t, d, "type")))
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	return b.String()
}

// modeMatrix enqueues every (held, requested) pair of modes on a fresh
// namespace, whole-object extents, two owners, and prints whether the
// request is granted (+) or would block (-). GROUP pairs share group id 1;
// the last line is GROUP against GROUP of another group.
func modeMatrix(t *testing.T, typ Type) string {
	var modes []Mode
	for _, m := range Modes {
		if validModeFor(typ, m) {
			modes = append(modes, m)
		}
	}
	try := func(held, req Mode, gidHeld, gidReq uint64) string {
		ns := mustNew(t, DefaultConfig())
		mk := func(o Owner, m Mode, gid uint64) Request {
			r := Request{Resource: Resource{ResID{1}, typ}, Mode: m, Owner: o, Flags: BlockNoWait}
			switch typ {
			case TypeExtent:
				r.Policy.Extent = Whole
				if m == GROUP {
					r.Policy.GID = gid
				}
			case TypeIBits:
				r.Policy.Bits = BitLookup
			}
			return r
		}
		if _, err := ns.Enqueue(mk("c1", held, gidHeld)); err != nil {
			t.Fatal(err)
		}
		_, err := ns.Enqueue(mk("c2", req, gidReq))
		switch {
		case err == nil:
			return "+"
		case errors.Is(err, ErrWouldBlock):
			return "-"
		}
		t.Fatal(err)
		return ""
	}
	var b strings.Builder
	b.WriteString("held\\req")
	for _, m := range modes {
		fmt.Fprintf(&b, " %5s", m)
	}
	b.WriteString("\n")
	for _, h := range modes {
		fmt.Fprintf(&b, "%-8s", h)
		for _, r := range modes {
			fmt.Fprintf(&b, " %5s", try(h, r, 1, 1))
		}
		b.WriteString("\n")
	}
	if typ == TypeExtent {
		fmt.Fprintf(&b, "GROUP gid 1 vs GROUP gid 2: %s\n", try(GROUP, GROUP, 1, 2))
	}
	return b.String()
}

func writeEffects(b *strings.Builder, e Effects) {
	for _, x := range e.Blocking {
		fmt.Fprintf(b, "blocking AST to %s: %s (for h%d)\n", x.Lock.Owner, fmtLock(x.Lock), x.By.Handle)
	}
	for _, l := range e.Granted {
		fmt.Fprintf(b, "completion AST to %s: %s\n", l.Owner, fmtLock(l))
	}
	for _, f := range e.Failed {
		fmt.Fprintf(b, "failed %s: %s\n", fmtLock(f.Lock), fmtErr(f.Err))
	}
	for _, l := range e.Changed {
		fmt.Fprintf(b, "changed %s\n", fmtLock(l))
	}
	for _, h := range e.Removed {
		fmt.Fprintf(b, "removed h%d\n", h)
	}
}

func writeResource(b *strings.Builder, ns *Namespace, res Resource) {
	locks := ns.Locks(res)
	if locks == nil {
		fmt.Fprintf(b, "%s: no locks\n", res)
		return
	}
	fmt.Fprintf(b, "%s\n", res)
	for _, l := range locks {
		fmt.Fprintf(b, "  %-7s %s\n", l.State, fmtLock(l))
	}
}

func fmtLock(l Lock) string {
	s := fmt.Sprintf("h%d %s", l.Handle, l.Owner)
	if l.Resource.Type == TypeFlock {
		s += fmt.Sprintf(":%d", l.Policy.FlockOwner)
	}
	s += " " + fmtPolicy(l)
	if l.CallbackPending {
		s += " cbpending"
	}
	return s
}

func fmtPolicy(l Lock) string {
	s := l.Mode.String()
	p := l.Policy
	switch l.Resource.Type {
	case TypeExtent:
		if l.Mode == GROUP {
			s += fmt.Sprintf(" gid=%d", p.GID)
		}
		s += " " + p.Extent.String()
		if l.Requested != p.Extent {
			s += " req " + l.Requested.String()
		}
	case TypeFlock:
		s += " " + p.Extent.String()
		if p.PID != 0 {
			s += fmt.Sprintf(" pid=%d", p.PID)
		}
	case TypeIBits:
		s += " " + p.Bits.String()
	}
	return s
}

var errnoNames = map[syscall.Errno]string{
	syscall.EINVAL: "EINVAL", syscall.ESTALE: "ESTALE", syscall.ENOENT: "ENOENT",
	syscall.EPERM: "EPERM", syscall.EAGAIN: "EAGAIN", syscall.EDEADLK: "EDEADLK", syscall.EIO: "EIO",
}

func fmtErr(err error) string {
	return fmt.Sprintf("error %s (%s): %v", errnoNames[Errno(err)], errs.KindOf(err), err)
}

func requestArgs(t *testing.T, d *datadriven.TestData) Request {
	req := Request{
		Resource: resourceArg(t, d),
		Mode:     parseMode(t, strArg(t, d, "mode")),
		Owner:    Owner(optStrArg(d, "owner")),
	}
	if d.HasArg("start") || d.HasArg("end") {
		req.Policy.Extent = Extent{uintArg(t, d, "start", 0), uintArg(t, d, "end", EOF)}
	} else if req.Resource.Type == TypeExtent || req.Resource.Type == TypeFlock {
		req.Policy.Extent = Whole
	}
	req.Policy.GID = uintArg(t, d, "gid", 0)
	if d.HasArg("bits") {
		req.Policy.Bits = parseBits(t, strArg(t, d, "bits"))
	}
	req.Policy.FlockOwner = uintArg(t, d, "fowner", 0)
	req.Policy.PID = uint32(uintArg(t, d, "pid", 0))
	if d.HasArg("nowait") {
		req.Flags |= BlockNoWait
	}
	if d.HasArg("noexp") {
		req.Flags |= NoExpansion
	}
	if d.HasArg("flags") {
		req.Flags |= Flags(uintArg(t, d, "flags", 0))
	}
	return req
}

func resourceArg(t *testing.T, d *datadriven.TestData) Resource {
	return Resource{ID: ResID{uintArg(t, d, "res", 1)}, Type: parseType(t, strArg(t, d, "type"))}
}

func handleArg(t *testing.T, d *datadriven.TestData) Handle {
	return Handle(uintArg(t, d, "h", 0))
}

func optStrArg(d *datadriven.TestData, key string) string {
	a, ok := d.Arg(key)
	if !ok || len(a.Vals) == 0 {
		return ""
	}
	return a.Vals[0]
}

func strArg(t *testing.T, d *datadriven.TestData, key string) string {
	a, ok := d.Arg(key)
	if !ok || len(a.Vals) != 1 {
		t.Fatalf("%s: %s needs %s=VALUE", d.Pos, d.Cmd, key)
	}
	return a.Vals[0]
}

// uintArg parses key=N (decimal, 0x hex, a leading h for handles, or EOF).
func uintArg(t *testing.T, d *datadriven.TestData, key string, def uint64) uint64 {
	a, ok := d.Arg(key)
	if !ok {
		return def
	}
	if len(a.Vals) != 1 {
		t.Fatalf("%s: %s=%v: want one value", d.Pos, key, a.Vals)
	}
	s := strings.TrimPrefix(a.Vals[0], "h")
	if s == "EOF" {
		return EOF
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		t.Fatalf("%s: %s: %v", d.Pos, key, err)
	}
	return v
}

func parseMode(t *testing.T, s string) Mode {
	for _, m := range Modes {
		if strings.EqualFold(m.String(), s) {
			return m
		}
	}
	v, err := strconv.ParseUint(s, 0, 8)
	if err != nil {
		t.Fatalf("bad mode %q", s)
	}
	return Mode(v)
}

func parseType(t *testing.T, s string) Type {
	for _, ty := range []Type{TypePlain, TypeExtent, TypeFlock, TypeIBits} {
		if strings.EqualFold(ty.String(), s) {
			return ty
		}
	}
	v, err := strconv.ParseUint(s, 0, 8)
	if err != nil {
		t.Fatalf("bad type %q", s)
	}
	return Type(v)
}

func parseBits(t *testing.T, s string) Bits {
	var b Bits
	for _, p := range strings.Split(s, "|") {
		i := slices.IndexFunc(bitNames[:], func(n string) bool { return strings.EqualFold(n, p) })
		if i >= 0 {
			b |= 1 << i
			continue
		}
		v, err := strconv.ParseUint(p, 0, 64)
		if err != nil {
			t.Fatalf("bad bits %q", s)
		}
		b |= Bits(v)
	}
	return b
}

// checkInvariants fails the test if the namespace's internal state is
// inconsistent: granted locks pairwise compatible, FLOCK owners' locks
// disjoint, every lock indexed once, gauges matching the queues, no empty
// resource, no waiting lock that could be granted, and no waiting lock
// blocked by a granted lock that was not called back.
func checkInvariants(t testing.TB, ns *Namespace) {
	t.Helper()
	granted, waiting, seen := 0, 0, 0
	for name, r := range ns.res {
		if len(r.granted)+len(r.waiting) == 0 {
			t.Fatalf("invariant: empty resource %s kept", name)
		}
		for i, a := range r.granted {
			if !a.granted || a.res != r || ns.locks[a.h] != a {
				t.Fatalf("invariant: granted lock h%d mislinked", a.h)
			}
			for _, b := range r.granted[i+1:] {
				if conflicts(a, b) && conflicts(b, a) { // (one way only: a tolerated lock)
					t.Fatalf("invariant: granted h%d and h%d conflict", a.h, b.h)
				}
				if name.Type == TypeFlock && a.flockKey() == b.flockKey() && a.pol.Extent.overlaps(b.pol.Extent) {
					t.Fatalf("invariant: flock h%d and h%d of one owner overlap", a.h, b.h)
				}
			}
			if name.Type == TypeExtent && !a.pol.Extent.contains(a.req) {
				t.Fatalf("invariant: h%d granted %v smaller than requested %v", a.h, a.pol.Extent, a.req)
			}
		}
		for i, w := range r.waiting {
			if w.granted || w.res != r || ns.locks[w.h] != w {
				t.Fatalf("invariant: waiting lock h%d mislinked", w.h)
			}
			if name.Type == TypeFlock {
				if r.flockBlocker(w) == nil {
					t.Fatalf("invariant: flock h%d waits on nothing", w.h)
				}
				if !slices.Contains(ns.flockWaiting[w.flockKey()], w) {
					t.Fatalf("invariant: flock h%d not indexed", w.h)
				}
			} else if r.grantable(w, r.waiting[:i]) {
				t.Fatalf("invariant: h%d waits but is grantable", w.h)
			} else {
				// Liveness: whatever granted lock it waits on has been
				// called back, or is a GROUP lock (never called back).
				for _, g := range r.granted {
					if conflicts(w, g) && !g.cbPending && g.mode != GROUP {
						t.Fatalf("invariant: h%d waits on h%d, which nobody called back", w.h, g.h)
					}
				}
			}
		}
		granted += len(r.granted)
		waiting += len(r.waiting)
		seen += len(r.granted) + len(r.waiting)
	}
	if seen != len(ns.locks) {
		t.Fatalf("invariant: %d locks on queues, %d handles", seen, len(ns.locks))
	}
	s := ns.stats
	if s.Granted != granted || s.Waiting != waiting || s.Resources != len(ns.res) {
		t.Fatalf("invariant: stats %+v, queues hold %d granted %d waiting on %d resources", s, granted, waiting, len(ns.res))
	}
	n := 0
	for k, q := range ns.flockWaiting {
		if len(q) == 0 {
			t.Fatalf("invariant: empty flock waiter list for %v", k)
		}
		n += len(q)
	}
	fw := 0
	for _, l := range ns.locks {
		if l.name.Type == TypeFlock && !l.granted {
			fw++
		}
	}
	if n != fw {
		t.Fatalf("invariant: %d flock waiters indexed, %d waiting", n, fw)
	}
}
