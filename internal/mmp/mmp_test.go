package mmp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const iv = 200 * time.Millisecond

// node starts a guard for dir as node name; lost gets its loss.
func node(t *testing.T, dir, name string) (*Guard, chan error, error) {
	t.Helper()
	lost := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var self atomic.Pointer[Guard]
	g, err := Start(ctx, Config{Dir: dir, Interval: iv, Node: name, Detail: "pid 1", Logger: quiet, OnLost: func(err error) {
		// As a server does: stop at once (OnLost may call Stop), and
		// Stop says the target was lost.
		if g := self.Load(); g != nil {
			if serr := g.Stop(context.Background()); !errors.Is(serr, ErrLost) {
				err = fmt.Errorf("%w; Stop after the loss: %v", err, serr)
			}
		}
		lost <- err
	}})
	self.Store(g)
	return g, lost, err
}

// hold stalls g's heartbeat, as a node frozen (SIGSTOP, a hung disk) would
// be; the returned func lets it go on.
func (g *Guard) hold() (resume func()) {
	ch := make(chan struct{})
	g.pause <- ch
	return func() { close(ch) }
}

// crash ends g as a killed server would: no clean block.
func (g *Guard) crash() {
	g.once.Do(func() {
		close(g.stop)
		<-g.done
		g.f.f.Close()
	})
}

func formatted(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := Format(dir, iv); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestStartStopClean(t *testing.T) {
	dir := formatted(t)
	b, err := Read(dir)
	if err != nil || !b.Clean() {
		t.Fatalf("formatted block %+v, %v: want clean", b, err)
	}
	start := time.Now()
	g, _, err := node(t, dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	// A clean block: one wait, after writing its own sequence.
	if el := time.Since(start); el < waitFor(iv) || el > waitFor(iv)+time.Second {
		t.Errorf("start took %v, want about %v", el, waitFor(iv))
	}
	s := g.Status()
	time.Sleep(4 * iv)
	if s2 := g.Status(); s2.Seq == s.Seq || !s2.LastWrite.After(s.LastWrite) {
		t.Errorf("no heartbeat: %+v then %+v", s, s2)
	}
	b, err = Read(dir)
	if err != nil || b.Clean() || b.Node != "a" || b.Detail != "pid 1" || b.Interval < iv { // (more if a write took long)
		t.Errorf("block of a running guard %+v, %v", b, err)
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(dir); err != nil || !b.Clean() {
		t.Fatalf("block after Stop %+v, %v: want clean", b, err)
	}
}

func TestSecondNodeRefused(t *testing.T) {
	dir := formatted(t)
	a, lostA, err := node(t, dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	start := time.Now()
	_, _, err = node(t, dir, "b")
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), `node "a" (pid 1)`) {
		t.Fatalf("second node: %v, want ErrInUse naming a", err)
	}
	// It watched a whole wait of a's interval before saying so.
	if el := time.Since(start); el < waitFor(iv) {
		t.Errorf("refused after %v, before the wait %v", el, waitFor(iv))
	}
	select {
	case err := <-lostA:
		t.Fatalf("a lost the target to a refused node: %v", err)
	case <-time.After(4 * iv):
	}
	if b, _ := Read(dir); b.Node != "a" {
		t.Errorf("block is %q's after the refusal", b.Node)
	}
}

// TestTwoStartAtOnce: both find the block clean and write a sequence of
// their own. The one whose sequence the other finds after its wait is
// refused; should one be so slow that it writes after the other's wait
// (and both start), the first's next heartbeat finds the second's sequence
// and gives the target up. Either way one node holds it.
func TestTwoStartAtOnce(t *testing.T) {
	dir := formatted(t)
	type res struct {
		g   *Guard
		err error
	}
	out := make(chan res, 2)
	for _, n := range []string{"a", "b"} {
		go func() {
			g, _, err := node(t, dir, n)
			out <- res{g, err}
		}()
	}
	var started []*Guard
	for range 2 {
		r := <-out
		if r.err == nil {
			started = append(started, r.g)
			defer r.g.Stop(context.Background())
		} else if !errors.Is(r.err, ErrInUse) {
			t.Errorf("start: %v", r.err)
		}
	}
	time.Sleep(4 * iv)
	holders := 0
	for _, g := range started {
		if !g.Status().Lost {
			holders++
		}
	}
	if holders != 1 {
		t.Fatalf("%d nodes hold the target (%d started)", holders, len(started))
	}
}

// TestPartnerJustAfter: b starts right after a has written its sequence
// and is still waiting: a rewrites the block while it waits, so b, watching
// it, gives way, and a keeps the target.
func TestPartnerJustAfter(t *testing.T) {
	dir := formatted(t)
	type res struct {
		g    *Guard
		lost chan error
		err  error
	}
	aDone := make(chan res, 1)
	go func() {
		g, lost, err := node(t, dir, "a")
		aDone <- res{g, lost, err}
	}()
	for {
		if b, _ := Read(dir); !b.Clean() {
			break // a wrote its sequence
		}
		time.Sleep(time.Millisecond)
	}
	_, _, err := node(t, dir, "b")
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("b, started while a was taking the target: %v, want ErrInUse", err)
	}
	a := <-aDone
	if a.err != nil {
		t.Fatalf("a: %v", a.err)
	}
	defer a.g.Stop(context.Background())
	select {
	case err := <-a.lost:
		t.Fatalf("a lost the target to b: %v", err)
	case <-time.After(4 * iv):
	}
}

func TestTakeOverAfterCrash(t *testing.T) {
	dir := formatted(t)
	a, _, err := node(t, dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	a.crash()
	start := time.Now()
	b, _, err := node(t, dir, "b")
	if err != nil {
		t.Fatalf("partner after a crash: %v", err)
	}
	defer b.Stop(context.Background())
	// Not clean: it watched, then waited again after its own write.
	if el := time.Since(start); el < 2*waitFor(iv) {
		t.Errorf("took over after %v, before two waits (%v)", el, 2*waitFor(iv))
	}
	if blk, _ := Read(dir); blk.Node != "b" {
		t.Errorf("block is %q's", blk.Node)
	}
}

// TestStalledNodeLosesTarget: a stalls longer than a partner's wait; the
// partner takes the target, and a, going on, finds the partner's sequence
// and reports the loss without writing again.
func TestStalledNodeLosesTarget(t *testing.T) {
	dir := formatted(t)
	a, lostA, err := node(t, dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	resume := a.hold()
	b, lostB, err := node(t, dir, "b")
	if err != nil {
		t.Fatalf("partner of a stalled node: %v", err)
	}
	defer b.Stop(context.Background())
	resume()
	select {
	case err := <-lostA:
		if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), `node "b"`) {
			t.Fatalf("a's loss: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a never noticed b took the target")
	}
	if !a.Status().Lost {
		t.Error("a's status does not say lost")
	}
	time.Sleep(4 * iv)
	select {
	case err := <-lostB:
		t.Fatalf("b lost the target to a: %v", err)
	default:
	}
	if blk, _ := Read(dir); blk.Node != "b" {
		t.Errorf("block is %q's: a wrote after its loss", blk.Node)
	}
	// a's Stop (its OnLost called it already) leaves b's block alone.
	if err := a.Stop(context.Background()); err != nil {
		t.Errorf("a's second Stop: %v", err)
	}
	if blk, _ := Read(dir); blk.Node != "b" || blk.Clean() {
		t.Errorf("a's Stop wrote the block: %+v", blk)
	}
}

// stallNextWrite has g's next beat stall for d between its read and its
// write, as a slow sync or a hung disk would, running during() in the
// stall; done is closed once that write is made.
func (g *Guard) stallNextWrite(d time.Duration, during func()) (done chan struct{}) {
	done = make(chan struct{})
	var once atomic.Bool
	f := func() {
		if once.CompareAndSwap(false, true) {
			if during != nil {
				go during()
			}
			time.Sleep(d)
			go func() { time.Sleep(10 * time.Millisecond); close(done) }()
		}
	}
	g.beforeWrite.Store(&f)
	return done
}

// TestStalledWrite: a beat reads its own sequence, then its write lands
// late. Past one wait of the recorded interval but short of two, it reads
// the block again and, finding its own, keeps the target — also when a
// partner wrote meanwhile and the late write overwrote that (the partner,
// still starting, finds it and gives way). Past two waits a partner may
// have served meanwhile: the node gives the target up.
func TestStalledWrite(t *testing.T) {
	w := waitFor(iv)
	for _, tc := range []struct {
		name    string
		stall   time.Duration
		partner bool // another node's sequence lands during the stall
		keeps   bool
	}{
		{"late", w * 13 / 10, false, true},
		{"late over a partner's", w * 13 / 10, true, true},
		{"too late", w * 5 / 2, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := formatted(t)
			a, lostA, err := node(t, dir, "a")
			if err != nil {
				t.Fatal(err)
			}
			defer a.Stop(context.Background())
			var during func()
			if tc.partner {
				during = func() {
					time.Sleep(w / 2)
					f, err := openFile(dir)
					if err == nil {
						f.write(Block{Seq: 7, Time: time.Now(), Interval: iv, Node: "b"})
						f.f.Close()
					}
				}
			}
			<-a.stallNextWrite(tc.stall, during)
			select {
			case err := <-lostA:
				if tc.keeps {
					t.Fatalf("a lost the target after a stall of %v: %v", tc.stall, err)
				}
				if !errors.Is(err, ErrLost) || !strings.Contains(err.Error(), "stalled") {
					t.Fatalf("a's loss: %v", err)
				}
			case <-time.After(3 * iv):
				if !tc.keeps {
					t.Fatalf("a kept the target after a stall of %v", tc.stall)
				}
				if b, err := Read(dir); err != nil || b.Node != "a" {
					t.Fatalf("block %+v, %v: want a's", b, err)
				}
			}
		})
	}
}

func TestMalformedBlock(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content []byte
	}{
		{"missing", nil},
		{"empty", []byte{}},
		{"garbage", bytes.Repeat([]byte("x"), 4096)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.content != nil {
				if err := os.WriteFile(filepath.Join(dir, FileName), tc.content, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			g, _, err := node(t, dir, "a")
			if err != nil {
				t.Fatalf("a block nobody rewrites: %v", err)
			}
			defer g.Stop(context.Background())
			if el := time.Since(start); el < 2*waitFor(iv) {
				t.Errorf("took it after %v, before watching (%v)", el, 2*waitFor(iv))
			}
		})
	}
	// A malformed block that somebody rewrites meanwhile is in use.
	dir := t.TempDir()
	p := filepath.Join(dir, FileName)
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(iv)
		os.WriteFile(p, []byte("y"), 0o600)
	}()
	if _, _, err := node(t, dir, "a"); !errors.Is(err, ErrInUse) {
		t.Fatalf("a malformed block that changes: %v, want ErrInUse", err)
	}
}

func TestStartCanceled(t *testing.T) {
	dir := formatted(t)
	a, _, err := node(t, dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	a.crash()
	ctx, cancel := context.WithTimeout(context.Background(), iv/2)
	defer cancel()
	if _, err := Start(ctx, Config{Dir: dir, Interval: iv, Logger: quiet}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start past its context: %v", err)
	}
	// Past its context after it wrote its own sequence (a clean block: no
	// first watch): it leaves the block clean, not holding a partner back.
	clean := formatted(t)
	ctx2, cancel2 := context.WithTimeout(context.Background(), iv/2)
	defer cancel2()
	if _, err := Start(ctx2, Config{Dir: clean, Interval: iv, Logger: quiet}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start past its context: %v", err)
	}
	if b, err := Read(clean); err != nil || !b.Clean() {
		t.Fatalf("block after a canceled start %+v, %v: want clean", b, err)
	}
}

func TestParse(t *testing.T) {
	good := make([]byte, blockSize)
	want := Block{Seq: 42, Time: time.Unix(0, 1700000000123456789), Interval: 5 * time.Second, Node: "oss1", Detail: "pid 7, 10.0.0.1@tcp"}
	want.marshal(good)
	got, err := Parse(good)
	if err != nil || !got.Time.Equal(want.Time) || got.Seq != want.Seq || got.Interval != want.Interval || got.Node != want.Node || got.Detail != want.Detail {
		t.Fatalf("Parse(marshal(%+v)) = %+v, %v", want, got, err)
	}
	long := Block{Seq: 1, Node: strings.Repeat("n", 100), Detail: strings.Repeat("d", 200)}
	buf := make([]byte, recordSize)
	long.marshal(buf)
	if got, err := Parse(buf); err != nil || len(got.Node) != maxNode || len(got.Detail) != maxDetail {
		t.Errorf("long names: %d %d %v", len(got.Node), len(got.Detail), err)
	}
	bad := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	for name, b := range map[string][]byte{
		"short":    good[:recordSize-1],
		"magic":    bad(func(b []byte) { b[0] = 'X' }),
		"checksum": bad(func(b []byte) { b[20]++ }),
		"zero seq": func() []byte { b := make([]byte, recordSize); Block{Seq: 0}.marshal(b); return b }(),
		"big seq":  func() []byte { b := make([]byte, recordSize); Block{Seq: seqMax + 1}.marshal(b); return b }(),
	} {
		if _, err := Parse(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	good := make([]byte, recordSize)
	Block{Seq: 7, Time: time.Unix(1, 2), Interval: time.Second, Node: "a", Detail: "b"}.marshal(good)
	clean := make([]byte, recordSize)
	Block{Seq: seqClean, Node: "host"}.marshal(clean)
	f.Add(good)
	f.Add(clean)
	f.Add([]byte("NACREMMP"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		blk, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// A record that parses encodes back to the same record.
		again := make([]byte, recordSize)
		blk.marshal(again)
		if blk2, err := Parse(again); err != nil || blk2.Seq != blk.Seq || blk2.Node != blk.Node || blk2.Detail != blk.Detail || !blk2.Time.Equal(blk.Time) {
			t.Fatalf("round trip of %+v: %+v, %v", blk, blk2, err)
		}
	})
}
