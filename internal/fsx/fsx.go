// Package fsx is a random-operation file exerciser in the style of
// fsx (the Apple/Linux file system exerciser, mmap-free): writes, reads,
// truncates and appends at random offsets on one file, each checked
// against an in-memory model of what the file must hold, so that any
// byte the file system loses, misplaces or invents is caught at the next
// read that covers it. Run drives any File: the client library's, an
// os.File on a mount, a local file.
package fsx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
)

// File is what the exerciser operates on.
type File interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Truncate(size int64) error
	Size() (int64, error)
}

// Config shapes a run.
type Config struct {
	// Ops is how many operations to run.
	Ops int
	// MaxSize bounds the file's size; MaxLen one read or write.
	MaxSize int64
	MaxLen  int
	// Seed makes a run repeatable.
	Seed uint64
	// Reopen, if not nil, is called every ReopenEvery operations and
	// returns the file to go on with (close and open again: what a close
	// flushed must be read back by the new handle).
	Reopen      func(File) (File, error)
	ReopenEvery int
}

// Stats counts what a run did.
type Stats struct {
	Writes, Reads, Truncates, Appends, Reopens, Sizes int
	BytesWritten, BytesRead                           int64
}

type op struct {
	kind    string
	off, n  int64
	sizeWas int64
}

func (o op) String() string {
	return fmt.Sprintf("%s off=%#x n=%#x (size was %#x)", o.kind, o.off, o.n, o.sizeWas)
}

// Run runs cfg.Ops operations on f, which must be empty, and returns the
// first mismatch (with the last operations) or error.
func Run(ctx context.Context, f File, cfg Config) (Stats, error) {
	var st Stats
	if cfg.MaxSize <= 0 || cfg.MaxLen <= 0 {
		return st, errors.New("fsx: MaxSize and MaxLen must be positive")
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	model := make([]byte, 0, cfg.MaxSize)
	buf := make([]byte, cfg.MaxLen)
	got := make([]byte, cfg.MaxLen)
	var hist [32]op
	fail := func(i int, format string, args ...any) (Stats, error) {
		var b strings.Builder
		fmt.Fprintf(&b, "fsx: op %d (seed %d): %s; last operations:", i, cfg.Seed, fmt.Sprintf(format, args...))
		for k := max(0, i-len(hist)+1); k <= i; k++ {
			fmt.Fprintf(&b, "\n  %d: %v", k, hist[k%len(hist)])
		}
		return st, errors.New(b.String())
	}
	for i := range cfg.Ops {
		if i%1024 == 0 && ctx.Err() != nil {
			return st, ctx.Err()
		}
		size := int64(len(model))
		if cfg.Reopen != nil && cfg.ReopenEvery > 0 && i > 0 && i%cfg.ReopenEvery == 0 {
			nf, err := cfg.Reopen(f)
			if err != nil {
				hist[i%len(hist)] = op{kind: "reopen", sizeWas: size}
				return fail(i, "reopen: %v", err)
			}
			f = nf
			st.Reopens++
		}
		switch r := rng.IntN(100); {
		case r < 40: // write
			off := rng.Int64N(cfg.MaxSize)
			n := min(int64(rng.IntN(cfg.MaxLen)+1), cfg.MaxSize-off)
			hist[i%len(hist)] = op{"write", off, n, size}
			p := buf[:n]
			fill(rng, p)
			if w, err := f.WriteAt(p, off); err != nil || int64(w) != n {
				return fail(i, "write: %d, %v", w, err)
			}
			if end := off + n; end > size {
				model = model[:end]
				if off > size {
					clear(model[size:off])
				}
			}
			copy(model[off:], p)
			st.Writes++
			st.BytesWritten += n
		case r < 50: // append
			n := min(int64(rng.IntN(cfg.MaxLen)+1), cfg.MaxSize-size)
			if n <= 0 {
				continue
			}
			hist[i%len(hist)] = op{"append", size, n, size}
			p := buf[:n]
			fill(rng, p)
			if w, err := f.WriteAt(p, size); err != nil || int64(w) != n {
				return fail(i, "append: %d, %v", w, err)
			}
			model = append(model, p...)
			st.Appends++
			st.BytesWritten += n
		case r < 58: // truncate, down more often than up
			ns := rng.Int64N(cfg.MaxSize + 1)
			if rng.IntN(3) > 0 {
				ns = rng.Int64N(size + 1)
			}
			hist[i%len(hist)] = op{"truncate", ns, 0, size}
			if err := f.Truncate(ns); err != nil {
				return fail(i, "truncate: %v", err)
			}
			if ns > size {
				model = model[:ns]
				clear(model[size:])
			} else {
				model = model[:ns]
			}
			st.Truncates++
		case r < 62: // size
			hist[i%len(hist)] = op{"size", 0, 0, size}
			s, err := f.Size()
			if err != nil || s != size {
				return fail(i, "size %d, %v; want %d", s, err, size)
			}
			st.Sizes++
		default: // read, sometimes past the end
			off := rng.Int64N(cfg.MaxSize)
			if size > 0 && rng.IntN(4) > 0 {
				off = rng.Int64N(size)
			}
			n := int64(rng.IntN(cfg.MaxLen) + 1)
			hist[i%len(hist)] = op{"read", off, n, size}
			p := got[:n]
			r, err := f.ReadAt(p, off)
			want := int64(0)
			if off < size {
				want = min(n, size-off)
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return fail(i, "read: %v", err)
			}
			if int64(r) != want {
				return fail(i, "read %d bytes, want %d (err %v)", r, want, err)
			}
			if want > 0 {
				if k := firstDiff(p[:r], model[off:off+want]); k >= 0 {
					return fail(i, "read: byte at %#x is %#02x, want %#02x", off+int64(k), p[k], model[off+int64(k)])
				}
			}
			st.Reads++
			st.BytesRead += int64(r)
		}
	}
	s, err := f.Size()
	if err != nil || s != int64(len(model)) {
		return fail(cfg.Ops-1, "final size %d, %v; want %d", s, err, len(model))
	}
	return st, nil
}

func fill(rng *rand.Rand, p []byte) {
	for i := 0; i < len(p); i += 8 {
		v := rng.Uint64()
		for k := 0; k < 8 && i+k < len(p); k++ {
			p[i+k] = byte(v >> (8 * k))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// OSFile is a File over an os.File (a file on a mount, or a local one).
type OSFile struct{ *os.File }

// Size returns the file's size from fstat.
func (f OSFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}
