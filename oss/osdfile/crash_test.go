package osdfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nacrefs/nacre/internal/fid"
	"github.com/nacrefs/nacre/oss/osd"
)

// The crash test: a child process (this test binary, re-executed) runs a
// deterministic workload of transactions against a target and is killed with
// SIGKILL at some point; the parent reopens the target, which replays its
// journal, and checks that it holds exactly the state after some prefix of
// the workload that includes every transaction the child saw durable
// (printed after Sync), byte for byte. Then another child carries on from
// that state and is killed too, and so on, so that kills land during
// writes, commits, checkpoints and replays.

const (
	crashEnvDir  = "NACRE_OSDFILE_CRASH_DIR"
	crashSeed    = 20250601
	crashMaxTx   = 4000
	crashJournal = MinJournalSize
)

// cobj is the model of one object.
type cobj struct {
	uid   uint32
	mtime time.Time
	data  []byte
}

// crashModel is the state after some prefix of the workload.
type crashModel struct {
	r       *rand.Rand
	objs    map[fid.FID]*cobj
	live    []fid.FID // existing objects, in creation order
	nextOid uint32
	lastID  []byte // the bookkeeping object's content
}

// cstep is one step of a workload transaction.
type cstep struct {
	kind       stepKind
	f          fid.FID
	off        int64
	data       []byte
	start, end uint64
	attr       osd.Attr
}

var lastIDObj = fid.FID{Seq: fid.SeqNormal + 1}

func newCrashModel() *crashModel {
	return &crashModel{r: rand.New(rand.NewPCG(crashSeed, 1)), objs: map[fid.FID]*cobj{}, nextOid: 1}
}

func (m *crashModel) pick() (fid.FID, *cobj, bool) {
	if len(m.live) == 0 {
		return fid.FID{}, nil, false
	}
	f := m.live[m.r.IntN(len(m.live))]
	return f, m.objs[f], true
}

func (m *crashModel) bytes(n int) []byte {
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		le.PutUint64(b[i:], m.r.Uint64())
	}
	return b[:n]
}

// next generates transaction n (transno n) and applies it to the model.
func (m *crashModel) next(n uint64) []cstep {
	var steps []cstep
	if n == 1 {
		return []cstep{{kind: kCreate, f: lastIDObj}}
	}
	touched := map[fid.FID]bool{}
	for k := 1 + m.r.IntN(3); k > 0; k-- {
		switch op := m.r.IntN(20); {
		case op < 5 || len(m.live) < 3: // a new object with data
			f := fid.FID{Seq: fid.SeqNormal, Oid: m.nextOid}
			m.nextOid++
			o := &cobj{uid: uint32(n)}
			m.objs[f], m.live = o, append(m.live, f)
			touched[f] = true
			off, data := m.r.IntN(5000), m.bytes(m.r.IntN(40000))
			o.data = modelPut(o.data, int(off), data)
			steps = append(steps, cstep{kind: kCreate, f: f, attr: osd.Attr{UID: uint32(n), Valid: osd.AttrUID}},
				cstep{kind: kWrite, f: f, off: int64(off), data: data})
		case op < 10: // append, maybe past a hole
			f, o, _ := m.pick()
			if touched[f] {
				continue
			}
			touched[f] = true
			if len(o.data) > 1<<20 {
				o.data = o.data[:1000]
				steps = append(steps, cstep{kind: kPunch, f: f, start: 1000, end: osd.EOF})
				continue
			}
			off, data := len(o.data)+m.r.IntN(3)*m.r.IntN(8000), m.bytes(1+m.r.IntN(60000))
			o.data = modelPut(o.data, off, data)
			steps = append(steps, cstep{kind: kWrite, f: f, off: int64(off), data: data})
		case op < 12: // attributes
			f, o, _ := m.pick()
			if touched[f] {
				continue
			}
			touched[f] = true
			o.uid, o.mtime = m.r.Uint32(), time.Unix(int64(n), int64(m.r.IntN(1e9))).UTC()
			steps = append(steps, cstep{kind: kSetAttr, f: f, attr: osd.Attr{UID: o.uid, Mtime: o.mtime, Valid: osd.AttrUID | osd.AttrMtime}})
		case op < 14: // punch a hole
			f, o, _ := m.pick()
			if touched[f] || len(o.data) == 0 {
				continue
			}
			touched[f] = true
			a := m.r.IntN(len(o.data))
			b := a + m.r.IntN(len(o.data)-a+1)
			clear(o.data[a:b])
			steps = append(steps, cstep{kind: kPunch, f: f, start: uint64(a), end: uint64(b)})
		case op < 15: // truncate down
			f, o, _ := m.pick()
			if touched[f] {
				continue
			}
			touched[f] = true
			sz := m.r.IntN(len(o.data) + 1)
			o.data = o.data[:sz]
			steps = append(steps, cstep{kind: kPunch, f: f, start: uint64(sz), end: osd.EOF})
		case op < 16: // destroy
			f, _, _ := m.pick()
			if touched[f] {
				continue
			}
			touched[f] = true
			delete(m.objs, f)
			for i, g := range m.live {
				if g == f {
					m.live = append(m.live[:i], m.live[i+1:]...)
					break
				}
			}
			steps = append(steps, cstep{kind: kDestroy, f: f})
		default: // a journaled record, LAST_ID style, sometimes large
			if touched[lastIDObj] {
				continue
			}
			touched[lastIDObj] = true
			data := []byte(fmt.Sprintf("%016d", n))
			if m.r.IntN(2) == 0 {
				data = append(data, m.bytes(m.r.IntN(60000))...)
			}
			m.lastID = modelPut(m.lastID, 0, data)
			steps = append(steps, cstep{kind: kRecord, f: lastIDObj, data: data})
		}
	}
	return steps
}

func modelPut(m []byte, off int, data []byte) []byte {
	if end := off + len(data); end > len(m) {
		m = append(m, make([]byte, end-len(m))...)
	}
	copy(m[off:], data)
	return m
}

func runCrashTx(d *Device, n uint64, steps []cstep) error {
	tx, err := d.Begin(bg)
	if err != nil {
		return err
	}
	defer tx.Abort()
	tx.SetTransno(n)
	for _, s := range steps {
		var err error
		switch s.kind {
		case kCreate:
			err = tx.Create(s.f, s.attr)
		case kWrite:
			// Three buffers, so the data moves as a vector.
			a, b := len(s.data)/3, 2*len(s.data)/3
			err = tx.WriteAt(s.f, [][]byte{s.data[:a], s.data[a:b], s.data[b:]}, s.off)
		case kSetAttr:
			err = tx.SetAttr(s.f, s.attr)
		case kPunch:
			err = tx.Punch(s.f, s.start, s.end)
		case kDestroy:
			err = tx.Destroy(s.f)
		case kRecord:
			err = tx.WriteRecord(s.f, s.data, 0)
		}
		if err != nil {
			return err
		}
	}
	return tx.Commit(bg)
}

// crashChild runs the workload from the target's state and never returns.
func crashChild(dir string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	d, err := Open(bg, dir, DefaultConfig())
	if err != nil {
		fail(err)
	}
	m := newCrashModel()
	start := d.LastCommitted()
	for n := uint64(1); n <= start; n++ {
		m.next(n)
	}
	fmt.Printf("ready %d\n", start)
	for n := start + 1; n <= crashMaxTx; n++ {
		if err := runCrashTx(d, n, m.next(n)); err != nil {
			fail(fmt.Errorf("transaction %d: %w", n, err))
		}
		if n%5 == 0 {
			if err := d.Sync(bg); err != nil {
				fail(err)
			}
			fmt.Printf("durable %d\n", n)
		}
	}
	d.Sync(bg)
	fmt.Printf("durable %d\ndone\n", uint64(crashMaxTx))
	select {} // wait for the kill
}

func TestCrash(t *testing.T) {
	if dir := os.Getenv(crashEnvDir); dir != "" {
		crashChild(dir)
	}
	if testing.Short() {
		t.Skip("short")
	}
	dir := filepath.Join(t.TempDir(), "ost")
	fc := DefaultFormatConfig("nacre-OST0001")
	fc.JournalSize = crashJournal
	if err := Format(bg, dir, fc); err != nil {
		t.Fatal(err)
	}
	// Kill delays: after the child is ready (workload running), or after
	// it starts (maybe during its Open, while it replays the journal the
	// previous child left).
	// Some rounds wait for the child to have made a few hundred
	// transactions durable first, so that the journal wraps (a checkpoint)
	// whatever the speed of the machine.
	type round struct {
		fromStart bool
		afterTx   uint64
		delay     time.Duration
	}
	rounds := []round{
		{false, 0, 0}, {false, 0, 2 * time.Millisecond}, {false, 0, 20 * time.Millisecond}, {false, 0, 60 * time.Millisecond},
		{false, 300, 3 * time.Millisecond}, {true, 0, 3 * time.Millisecond}, {false, 0, 400 * time.Millisecond},
		{true, 0, 10 * time.Millisecond}, {false, 300, 0}, {true, 0, 1 * time.Millisecond},
		{false, 0, 250 * time.Millisecond}, {false, 200, 7 * time.Millisecond}, {false, 0, 40 * time.Millisecond},
	}
	// The generation after Format is 1; each Open and each Close starts a
	// new one, and so does every checkpoint in between.
	var last, wraps uint64
	prevGen := uint64(1)
	for i, r := range rounds {
		durable, start, ready := runCrashChild(t, dir, r.fromStart, r.afterTx, r.delay)
		if ready && start < last {
			t.Fatalf("round %d: the child started from transno %d, the target had %d", i, start, last)
		}
		var gen, endGen uint64
		last, gen, endGen = verifyCrash(t, dir, max(durable, last))
		if gen > prevGen+2 { // more than the child's Open and ours
			wraps += gen - prevGen - 2
		}
		prevGen = endGen
		t.Logf("round %d: killed %v after %s; durable %d acknowledged, %d recovered, journal generation %d",
			i, r.delay, map[bool]string{true: "start", false: "ready"}[r.fromStart]+map[bool]string{true: fmt.Sprintf(" and %d transactions", r.afterTx)}[r.afterTx > 0], durable, last, gen)
		if last >= crashMaxTx {
			break
		}
	}
	if wraps == 0 {
		t.Errorf("no child ever checkpointed: the workload never wrapped the journal")
	}
	t.Logf("the children checkpointed %d times", wraps)
}

// runCrashChild runs a child on dir, kills it delay after it is ready (or
// after it starts), and returns the last transno it printed as durable, the
// one it started at, and whether it got as far as ready.
func runCrashChild(t *testing.T, dir string, fromStart bool, afterTx uint64, delay time.Duration) (durable, start uint64, ready bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrash$")
	cmd.Env = append(os.Environ(), crashEnvDir+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var timer <-chan time.Time
	if fromStart {
		timer = time.After(delay)
	}
	killed := false
	for lines != nil {
		select {
		case l, ok := <-lines:
			if !ok {
				lines = nil
				break
			}
			word, num, _ := strings.Cut(l, " ")
			v, _ := strconv.ParseUint(num, 10, 64)
			switch word {
			case "ready":
				start, ready = v, true
				if !fromStart && afterTx == 0 {
					timer = time.After(delay)
				}
			case "durable":
				durable = v
				if afterTx > 0 && v >= start+afterTx && timer == nil && !killed {
					timer = time.After(delay)
				}
			case "done":
				timer = time.After(0)
			}
		case <-timer:
			cmd.Process.Kill()
			killed, timer = true, nil
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("the child exited by itself: %v\n%s", err, stderr.String())
	}
	return durable, start, ready
}

// verifyCrash reopens dir and checks it against the model, twice (the second
// open must find nothing to redo that changes anything). It returns the
// recovered transno and the journal generation after the first open and
// after the last close.
func verifyCrash(t *testing.T, dir string, durable uint64) (got, gen, endGen uint64) {
	t.Helper()
	for pass := range 2 {
		d, err := Open(bg, dir, testConfig(t))
		if err != nil {
			t.Fatalf("reopen after the kill (pass %d): %v", pass, err)
		}
		lc := d.LastCommitted()
		if lc < durable {
			t.Fatalf("LastCommitted %d after the kill, but the child saw %d durable", lc, durable)
		}
		if pass == 1 && lc != got {
			t.Fatalf("LastCommitted %d on the second open, %d on the first", lc, got)
		}
		got = lc
		if pass == 0 {
			gen = d.gen
		}
		m := newCrashModel()
		for n := uint64(1); n <= lc; n++ {
			m.next(n)
		}
		checkCrashModel(t, d, m, lc)
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		endGen = d.gen
	}
	return got, gen, endGen
}

func checkCrashModel(t *testing.T, d *Device, m *crashModel, tn uint64) {
	t.Helper()
	for oid := uint32(1); oid < m.nextOid+10; oid++ {
		f := fid.FID{Seq: fid.SeqNormal, Oid: oid}
		a, err := d.GetAttr(bg, f)
		o := m.objs[f]
		if o == nil {
			if !errors.Is(err, osd.ErrNotExist) {
				t.Fatalf("after transno %d: %v should not exist: %+v, %v", tn, f, a, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("after transno %d: %v: %v", tn, f, err)
		}
		if a.Size != uint64(len(o.data)) || a.UID != o.uid || !a.Mtime.Equal(o.mtime) {
			t.Fatalf("after transno %d: %v: size %d uid %d mtime %v; model %d %d %v", tn, f, a.Size, a.UID, a.Mtime, len(o.data), o.uid, o.mtime)
		}
		b := make([]byte, len(o.data)+10)
		n, err := d.ReadAt(bg, f, [][]byte{b}, 0)
		if err != nil || n != len(o.data) {
			t.Fatalf("after transno %d: read %v: %d, %v", tn, f, n, err)
		}
		if i := firstDifference(b[:n], o.data); i >= 0 {
			t.Fatalf("after transno %d: %v differs from the model at byte %d of %d", tn, f, i, n)
		}
	}
	if tn >= 1 {
		b := make([]byte, len(m.lastID)+10)
		n, err := d.ReadAt(bg, lastIDObj, [][]byte{b}, 0)
		if err != nil || !bytes.Equal(b[:n], m.lastID) {
			t.Fatalf("after transno %d: the record object reads %d bytes (%v), model %d, differ at %d", tn, n, err, len(m.lastID), firstDifference(b[:n], m.lastID))
		}
	}
}

func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
