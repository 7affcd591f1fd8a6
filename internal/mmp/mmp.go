// Package mmp is multiple-mount protection for a target directory that
// more than one server can reach — the shared disk of a failover pair —
// as ldiskfs has it (ext4's MMP block and kmmpd): the server serving the
// target rewrites a heartbeat block every interval with a new sequence
// number; a server about to serve the target reads the block, waits long
// enough for a live server to have rewritten it, and refuses if it did.
// It then writes a sequence of its own and waits once more, so that two
// servers starting at once see each other. A server whose heartbeat finds
// another's sequence in the block (it stalled long enough for a partner to
// take the target over) stops writing and reports the loss: it must stop
// serving the target at once.
//
// The flock a server takes on the directory (server.lockTarget) keeps two
// processes of one host apart; MMP is what keeps two hosts apart, which
// share no locks.
package mmp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FileName is the heartbeat block's file in a target directory.
const FileName = "nacre-mmp"

// DefaultInterval is how often a server rewrites the block: ext4's
// EXT4_MMP_UPDATE_INTERVAL.
const DefaultInterval = 5 * time.Second

// Sequence numbers, as ext4's: a running server's are 1..seqMax; seqClean
// says the last server stopped cleanly.
const (
	seqClean uint32 = 0xFF4D4D50
	seqMax   uint32 = 0xE24D4D4F
)

// The block: one 4 KiB sector-aligned block (read and written whole,
// with O_DIRECT where the file system has it) holding the record:
//
//	0   magic "NACREMMP"
//	8   version (2 bytes), 2 reserved
//	12  sequence
//	16  time of the write, Unix ns
//	24  the writer's interval, ms
//	28  node name length, detail length (1 byte each), 2 reserved
//	32  node name (64 bytes)
//	96  detail (160 bytes)
//	256 CRC-32C of bytes 0-255
const (
	blockSize  = 4096
	recordSize = 260
	maxNode    = 64
	maxDetail  = 160
	version    = 1
)

var magic = [8]byte{'N', 'A', 'C', 'R', 'E', 'M', 'M', 'P'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors callers branch on.
var (
	// ErrInUse: another node serves the target (or started to).
	ErrInUse = errors.New("the target is in use on another node")
	// ErrLost: a partner took the target over from this node.
	ErrLost = errors.New("the target was taken over by another node")
	// ErrMalformed: the block is not an MMP record.
	ErrMalformed = errors.New("malformed MMP block")
)

// Block is the heartbeat record.
type Block struct {
	Seq      uint32
	Time     time.Time
	Interval time.Duration
	// Node names the writer (its host name); Detail says more (its
	// process, its NIDs).
	Node, Detail string
}

// Clean reports whether the last server stopped cleanly.
func (b Block) Clean() bool { return b.Seq == seqClean }

// who names the block's writer for a person.
func (b Block) who() string {
	if b.Detail == "" {
		return fmt.Sprintf("node %q", b.Node)
	}
	return fmt.Sprintf("node %q (%s)", b.Node, b.Detail)
}

// Marshal encodes b into the first recordSize bytes of buf, cutting the
// names at their limits.
func (b Block) marshal(buf []byte) {
	clear(buf[:recordSize])
	copy(buf, magic[:])
	le := binary.LittleEndian
	le.PutUint16(buf[8:], version)
	le.PutUint32(buf[12:], b.Seq)
	le.PutUint64(buf[16:], uint64(b.Time.UnixNano()))
	le.PutUint32(buf[24:], uint32(min(b.Interval.Milliseconds(), 1<<31)))
	node, detail := b.Node[:min(len(b.Node), maxNode)], b.Detail[:min(len(b.Detail), maxDetail)]
	buf[28], buf[29] = byte(len(node)), byte(len(detail))
	copy(buf[32:], node)
	copy(buf[96:], detail)
	le.PutUint32(buf[256:], crc32.Checksum(buf[:256], castagnoli))
}

// Parse decodes a block read from the file; anything that is not a
// whole, checksummed record of this version is ErrMalformed.
func Parse(buf []byte) (Block, error) {
	if len(buf) < recordSize {
		return Block{}, fmt.Errorf("%w: %d bytes, want %d", ErrMalformed, len(buf), recordSize)
	}
	if !bytes.Equal(buf[:8], magic[:]) {
		return Block{}, fmt.Errorf("%w: bad magic %q", ErrMalformed, buf[:8])
	}
	le := binary.LittleEndian
	if sum, want := crc32.Checksum(buf[:256], castagnoli), le.Uint32(buf[256:]); sum != want {
		return Block{}, fmt.Errorf("%w: checksum %#x, recorded %#x", ErrMalformed, sum, want)
	}
	if v := le.Uint16(buf[8:]); v != version {
		return Block{}, fmt.Errorf("%w: version %d, want %d", ErrMalformed, v, version)
	}
	nl, dl := int(buf[28]), int(buf[29])
	if nl > maxNode || dl > maxDetail {
		return Block{}, fmt.Errorf("%w: name lengths %d and %d", ErrMalformed, nl, dl)
	}
	b := Block{
		Seq:      le.Uint32(buf[12:]),
		Time:     time.Unix(0, int64(le.Uint64(buf[16:]))),
		Interval: time.Duration(le.Uint32(buf[24:])) * time.Millisecond,
		Node:     string(buf[32 : 32+nl]),
		Detail:   string(buf[96 : 96+dl]),
	}
	if b.Seq == 0 || (b.Seq > seqMax && b.Seq != seqClean) {
		return Block{}, fmt.Errorf("%w: sequence %#x", ErrMalformed, b.Seq)
	}
	return b, nil
}

// file is the block's file, open for reads and writes that bypass the
// page cache where the file system allows it: on a disk two hosts share,
// each must read what the other wrote, not its own cache.
type file struct {
	f      *os.File
	buf    []byte // blockSize bytes, aligned for O_DIRECT
	direct bool   // opened with O_DIRECT
}

func openFile(dir string) (*file, error) {
	p := filepath.Join(dir, FileName)
	direct := true
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|unix.O_DIRECT, 0o600)
	if errors.Is(err, unix.EINVAL) { // no O_DIRECT here (tmpfs)
		direct = false
		f, err = os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("mmp: %w", err)
	}
	return &file{f: f, buf: alignedBlock(), direct: direct}, nil
}

// alignedBlock returns blockSize bytes at a blockSize-aligned address.
func alignedBlock() []byte {
	b := make([]byte, 2*blockSize)
	off := int(-uintptr(unsafe.Pointer(&b[0])) & (blockSize - 1))
	return b[off : off+blockSize : off+blockSize]
}

// read returns the block's bytes as they are on the store (a copy) and
// the record, or the record's error (an empty file is ErrMalformed).
func (f *file) read() ([]byte, Block, error) {
	n, err := f.f.ReadAt(f.buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, Block{}, fmt.Errorf("mmp: read %s: %w", f.f.Name(), err)
	}
	raw := bytes.Clone(f.buf[:n])
	b, err := Parse(raw)
	return raw, b, err
}

// write writes b and makes it durable.
func (f *file) write(b Block) error {
	_, err := f.writeAt(b)
	return err
}

// writeAt is write, also returning when the block became what other
// readers see (the write, before the sync).
func (f *file) writeAt(b Block) (time.Time, error) {
	clear(f.buf)
	b.marshal(f.buf)
	if _, err := f.f.WriteAt(f.buf, 0); err != nil {
		return time.Time{}, fmt.Errorf("mmp: write %s: %w", f.f.Name(), err)
	}
	landed := time.Now()
	if err := unix.Fdatasync(int(f.f.Fd())); err != nil {
		return landed, fmt.Errorf("mmp: sync %s: %w", f.f.Name(), err)
	}
	return landed, nil
}

// Format writes a clean block into dir (mkfs, or turning MMP on).
func Format(dir string, interval time.Duration) error {
	f, err := openFile(dir)
	if err != nil {
		return err
	}
	defer f.f.Close()
	return f.write(Block{Seq: seqClean, Time: time.Now(), Interval: interval, Node: hostname()})
}

// Read returns the block in dir, for a person's look (lctl, tests).
func Read(dir string) (Block, error) {
	f, err := openFile(dir)
	if err != nil {
		return Block{}, err
	}
	defer f.f.Close()
	_, b, err := f.read()
	return b, err
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}

// MinInterval is the shortest update interval; shorter ones are raised
// to it.
const MinInterval = 50 * time.Millisecond

// Config configures a Guard.
type Config struct {
	// Dir is the target directory.
	Dir string
	// Interval is how often the block is rewritten; 0 means
	// DefaultInterval. The block records at least twice the time its last
	// write took, so that a partner watches long enough for a slow disk.
	Interval time.Duration
	// Node and Detail name this server in the block (Node defaults to
	// the host name): what a refused partner tells its administrator.
	Node, Detail string
	// Logger receives the guard's logs; nil means slog.Default().
	Logger *slog.Logger
	// OnLost is called once, after the heartbeat stopped, with an error
	// wrapping ErrLost when another node took the target over, or when
	// this node could not rewrite the block for so long that a partner may
	// have: the caller must stop serving the target at once (ldiskfs
	// aborts the file system). It may call Stop.
	OnLost func(error)
}

// Guard is a running heartbeat: the target is this node's until Stop.
type Guard struct {
	cfg  Config
	f    *file
	log  *slog.Logger
	stop chan struct{}
	done chan struct{}
	once sync.Once // Stop's

	mu struct {
		sync.Mutex
		seq uint32 // the last sequence written and synced
		// tried is a sequence whose write failed, which the block may
		// hold all the same (written, not synced); 0 if none.
		tried    uint32
		landed   time.Time     // when other readers could see seq (Status's LastWrite)
		writeDur time.Duration // how long that write took
		recorded time.Duration // the interval that write recorded
		lost     bool
	}
	// pause, in tests, holds the heartbeat as a stalled node's would be;
	// beforeWrite, in tests, runs between a beat's read and its write.
	pause       chan chan struct{}
	beforeWrite atomic.Pointer[func()]
}

// waitFor is how long a starting server watches a block written every
// interval: ext4's 2 x interval + 1 s (the second shortened for the short
// intervals of tests), at most interval + 60 s.
func waitFor(interval time.Duration) time.Duration {
	return min(2*interval+min(interval, time.Second), interval+time.Minute)
}

// errNotOurs is a block another node wrote, seen by a beat.
var errNotOurs = errors.New("mmp: the block holds another node's sequence")

// Start takes the target in cfg.Dir for this node, or says who has it:
// it returns an error wrapping ErrInUse if another node rewrote the block
// while it watched. Unless the last server stopped cleanly it first
// watches for a whole waitFor of the block's interval; then it writes its
// own sequence and goes on rewriting it for another waitFor, checking each
// time that the block is still its own (two nodes starting at once: the
// one that finds the other's sequence gives way). ctx bounds the waits.
func Start(ctx context.Context, cfg Config) (*Guard, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	cfg.Interval = max(cfg.Interval, MinInterval)
	if cfg.Node == "" {
		cfg.Node = hostname()
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	lg = lg.With("dir", cfg.Dir)
	f, err := openFile(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if !f.direct {
		lg.Warn("mmp: the file system takes no O_DIRECT: on storage another host shares, this node may read the MMP block from its own cache and miss the other's writes")
	}
	g := &Guard{cfg: cfg, f: f, log: lg, stop: make(chan struct{}), done: make(chan struct{}), pause: make(chan chan struct{})}
	if err := g.take(ctx); err != nil {
		// A sequence this node wrote would keep a partner starting now
		// waiting, or refused: mark the block clean, if it is still ours.
		if g.held() == nil {
			if cerr := g.writeClean(); cerr != nil {
				lg.Warn("mmp: the MMP block is not marked clean after a failed start", "err", cerr)
			}
		}
		f.f.Close()
		return nil, err
	}
	go func() {
		err := g.heartbeat()
		close(g.done)
		if err != nil && g.cfg.OnLost != nil {
			g.cfg.OnLost(err)
		}
	}()
	return g, nil
}

func (g *Guard) take(ctx context.Context) error {
	raw, b, err := g.f.read()
	watch := g.cfg.Interval
	switch {
	case err == nil && b.Clean():
	case err == nil:
		watch = max(watch, b.Interval)
		if err := g.watch(ctx, raw, watch, fmt.Sprintf("%s wrote the MMP block %v ago", b.who(), time.Since(b.Time).Round(time.Millisecond))); err != nil {
			return err
		}
	case errors.Is(err, ErrMalformed):
		// Not a record (torn, never written, overwritten): whoever serves
		// the target would rewrite it, so watch it all the same.
		g.log.Warn("mmp: the MMP block is not a record; watching whether a node rewrites it", "err", err)
		if err := g.watch(ctx, raw, watch, "the MMP block is not a record"); err != nil {
			return err
		}
	default:
		return err
	}
	if err := g.write(rand.Uint32N(seqMax) + 1); err != nil {
		return err
	}
	deadline := time.Now().Add(waitFor(watch))
	for {
		wait := min(g.cfg.Interval, time.Until(deadline))
		if err := sleep(ctx, max(wait, 0)); err != nil {
			return fmt.Errorf("mmp: %s: %w", g.cfg.Dir, err)
		}
		// Beats, the last at the deadline: the heartbeat's first comes an
		// interval after it, as every other.
		if b, err := g.beat(); err != nil {
			return g.inUse(b, err)
		}
		if !time.Now().Before(deadline) {
			return nil
		}
	}
}

// watch waits waitFor(interval) and fails with ErrInUse if the block is no
// longer raw then.
func (g *Guard) watch(ctx context.Context, raw []byte, interval time.Duration, why string) error {
	w := waitFor(interval)
	g.log.Info("mmp: waiting to make sure no other node serves the target", "wait", w, "why", why)
	if err := sleep(ctx, w); err != nil {
		return fmt.Errorf("mmp: %s: %w", g.cfg.Dir, err)
	}
	now, b, err := g.f.read()
	switch {
	case err != nil && !errors.Is(err, ErrMalformed):
		return err // the store's error, not another node's doing
	case !bytes.Equal(now, raw):
		if err == nil {
			err = errNotOurs
		}
		return g.inUse(b, err)
	}
	return nil
}

// inUse is the error of a start that found another node's block (b, or
// err: errNotOurs, or why the block does not decode now); an I/O error
// comes back as it is.
func (g *Guard) inUse(b Block, err error) error {
	switch {
	case errors.Is(err, errNotOurs):
		return fmt.Errorf("mmp: %s: %w: %s wrote the MMP block %v ago", g.cfg.Dir, ErrInUse, b.who(), time.Since(b.Time).Round(time.Millisecond))
	case errors.Is(err, ErrMalformed):
		return fmt.Errorf("mmp: %s: %w: the MMP block changed while this node watched it (%v)", g.cfg.Dir, ErrInUse, err)
	}
	return err
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// write writes seq as this node's and syncs it. The block records the
// interval, raised to twice the time the last write took.
func (g *Guard) write(seq uint32) error {
	g.mu.Lock()
	g.mu.tried = seq
	// (In whole ms, as the block holds it: a partner's wait is this one.)
	recorded := max(g.cfg.Interval, 2*g.mu.writeDur).Truncate(time.Millisecond)
	g.mu.Unlock()
	start := time.Now()
	landed, err := g.f.writeAt(Block{Seq: seq, Time: start, Interval: recorded, Node: g.cfg.Node, Detail: g.cfg.Detail})
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.mu.seq, g.mu.tried, g.mu.landed, g.mu.writeDur, g.mu.recorded = seq, 0, landed, time.Since(start), recorded
	g.mu.Unlock()
	return nil
}

// ours reports whether seq, read from the block, is this node's: the last
// written, or one whose write failed but may have reached the store.
func (g *Guard) ours(seq uint32) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return seq != 0 && seq != seqClean && (seq == g.mu.seq || seq == g.mu.tried)
}

// held checks that the block holds this node's sequence: nil, or
// errNotOurs, ErrMalformed or the store's error.
func (g *Guard) held() error {
	_, b, err := g.f.read()
	if err == nil && !g.ours(b.Seq) {
		err = errNotOurs
	}
	return err
}

// Held reports whether the target is still this node's, reading the block
// now: nil, or an error wrapping ErrLost (another node wrote it) or the
// store's error. For a change that must not reach a target a partner took
// (tunefs).
func (g *Guard) Held() error {
	err := g.held()
	if errors.Is(err, errNotOurs) || errors.Is(err, ErrMalformed) {
		return fmt.Errorf("mmp: %s: %w: %w", g.cfg.Dir, ErrLost, err)
	}
	return err
}

func (g *Guard) writeClean() error {
	return g.f.write(Block{Seq: seqClean, Time: time.Now(), Interval: g.cfg.Interval, Node: g.cfg.Node, Detail: g.cfg.Detail})
}

// beat checks that the block still holds this node's sequence and writes
// the next. It fails with errNotOurs (and the block), ErrMalformed (the
// block was overwritten), errStalled (the write landed so late that a
// partner may have taken the target and served meanwhile), or the
// store's error.
func (g *Guard) beat() (Block, error) {
	g.mu.Lock()
	prev, recorded := g.mu.landed, g.mu.recorded
	g.mu.Unlock()
	readAt := time.Now()
	_, b, err := g.f.read()
	if err != nil {
		return b, err
	}
	if !g.ours(b.Seq) {
		return b, errNotOurs
	}
	next := b.Seq + 1
	if next > seqMax {
		next = 1
	}
	if f := g.beforeWrite.Load(); f != nil {
		(*f)()
	}
	if err := g.write(next); err != nil {
		return b, err
	}
	// A partner watching the block saw it stand still if this write
	// landed a whole wait (w) of the interval the last one recorded after
	// it (a slow sync, a hung disk, a frozen node): it may have written
	// its own sequence, after that wait and after this beat's read (which
	// found ours), and this write overwritten it. A partner only serves a
	// wait after its write: if this write landed before both readAt+w and
	// prev+2w, the partner, still starting, finds it and gives way — the
	// block must just hold ours when read again. Later than both, the
	// partner may have served meanwhile: this node gives the target up.
	// (ext4's kmmpd reads the block again after a late update too.)
	g.mu.Lock()
	landed := g.mu.landed
	g.mu.Unlock()
	w := waitFor(recorded)
	switch gap := landed.Sub(prev); {
	case prev.IsZero() || gap < w:
	case landed.Sub(readAt) >= w && gap >= 2*w:
		return b, fmt.Errorf("%w: %v between two heartbeats, %v after its read", errStalled,
			gap.Round(time.Millisecond), landed.Sub(readAt).Round(time.Millisecond))
	default:
		if err := g.held(); err != nil {
			return b, fmt.Errorf("%w: %v between two heartbeats, then: %w", errStalled, gap.Round(time.Millisecond), err)
		}
	}
	return b, nil
}

// errStalled is a beat whose write landed so late that a partner may have
// taken the target meanwhile.
var errStalled = errors.New("mmp: heartbeat stalled long enough for a partner to take the target")

// heartbeat rewrites the block every interval until Stop, or until the
// target is lost: it returns the loss.
func (g *Guard) heartbeat() error {
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return nil
		case resume := <-g.pause:
			select {
			case <-resume:
			case <-g.stop:
				return nil
			}
			continue
		case <-t.C:
		}
		b, err := g.beat()
		switch {
		case err == nil:
		case errors.Is(err, errStalled):
			return g.lose(fmt.Errorf("mmp: %s: %w: %w", g.cfg.Dir, ErrLost, err))
		case errors.Is(err, errNotOurs):
			return g.lose(fmt.Errorf("mmp: %s: %w: %s wrote the MMP block %v ago", g.cfg.Dir, ErrLost, b.who(), time.Since(b.Time).Round(time.Millisecond)))
		case errors.Is(err, ErrMalformed):
			return g.lose(fmt.Errorf("mmp: %s: %w: the MMP block was overwritten (%v)", g.cfg.Dir, ErrLost, err))
		default:
			// The store's error. The next beat tries again, unless a
			// partner may already have watched the block stand still for
			// its whole wait: then this node must stop as if it had lost.
			g.mu.Lock()
			since, recorded := time.Since(g.mu.landed), g.mu.recorded
			g.mu.Unlock()
			if since >= waitFor(recorded)-g.cfg.Interval {
				return g.lose(fmt.Errorf("mmp: %s: %w: no heartbeat written for %v, long enough for a partner to take the target (%w)",
					g.cfg.Dir, ErrLost, since.Round(time.Millisecond), err))
			}
			g.log.Warn("mmp: heartbeat failed; trying again", "err", err, "last_write", since.Round(time.Millisecond))
		}
	}
}

func (g *Guard) lose(err error) error {
	g.mu.Lock()
	g.mu.lost = true
	g.mu.Unlock()
	g.log.Error("mmp: this node must stop serving the target", "err", err)
	return err
}

// Status is a Guard's state, for a person.
type Status struct {
	Seq       uint32
	LastWrite time.Time
	// Recorded is the interval the last write recorded: the configured
	// one, or twice that write's time when longer.
	Recorded time.Duration
	Lost     bool
}

// Status returns the guard's state.
func (g *Guard) Status() Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Status{Seq: g.mu.seq, LastWrite: g.mu.landed, Recorded: g.mu.recorded, Lost: g.mu.lost}
}

// Stop ends the heartbeat and marks the block clean, so that the next
// server starts without the first wait; unless the target was lost (an
// error wrapping ErrLost) or the block is no longer this node's (left as
// it is). A heartbeat stuck in the store's I/O past ctx is left to end by
// itself, the block as it is. Calls after the first do nothing.
func (g *Guard) Stop(ctx context.Context) (err error) {
	g.once.Do(func() { err = g.stopOnce(ctx) })
	return err
}

func (g *Guard) stopOnce(ctx context.Context) error {
	close(g.stop)
	select {
	case <-g.done:
	default:
		select {
		case <-g.done:
		case <-ctx.Done():
			go func() {
				<-g.done
				g.f.f.Close()
			}()
			return fmt.Errorf("mmp: %s: stop: %w", g.cfg.Dir, ctx.Err())
		}
	}
	defer g.f.f.Close()
	g.mu.Lock()
	lost := g.mu.lost
	g.mu.Unlock()
	if lost {
		return fmt.Errorf("mmp: %s: %w", g.cfg.Dir, ErrLost)
	}
	_, b, err := g.f.read()
	if err == nil && !g.ours(b.Seq) {
		err = fmt.Errorf("%w: %w (%s's), left as it is", ErrLost, errNotOurs, b.Node)
	}
	if err != nil {
		g.log.Warn("mmp: the MMP block is not marked clean", "err", err)
		return fmt.Errorf("mmp: %s: stop: %w", g.cfg.Dir, err)
	}
	return g.writeClean()
}
