// Package policy is Nacre's HSM policy engine (what Lustre sites run
// robinhood for): it reads the MDT's changelog as a registered user and
// applies rules — archive regular files not modified for a while, release
// archived files while the OSTs are fuller than a high watermark until
// they are below a low one (least recently modified first), and remove
// the archive copies of archived files that were deleted — clearing the
// changelog as it goes.
package policy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/mds/mdd"
	hsmv1 "github.com/nacrefs/nacre/proto/nacre/hsm/v1"
	"github.com/nacrefs/nacre/services/hsm"
)

// Rules are what the engine does.
type Rules struct {
	// ArchiveID is the archive files go to.
	ArchiveID uint32 `mapstructure:"archive_id"`
	// ArchiveAfter: archive a file not modified for this long; 0 never.
	ArchiveAfter time.Duration `mapstructure:"archive_after"`
	// HighWatermark and LowWatermark, percent of the OSTs' space used:
	// above High, archived files are released until below Low; 0 never.
	HighWatermark float64 `mapstructure:"high_watermark"`
	LowWatermark  float64 `mapstructure:"low_watermark"`
	// RemoveDeleted removes the archive copies of deleted archived files.
	RemoveDeleted bool `mapstructure:"remove_deleted"`
}

// Config configures an Engine.
type Config struct {
	// FS is the file system (root's credentials are used).
	FS *client.FS
	// HSM submits actions to the coordinator.
	HSM *hsm.Client
	// User is the changelog user the engine reads as (the N of clN).
	User uint32
	Rules
	// MaxTracked bounds the files the engine remembers; 0 means 1<<20.
	MaxTracked int
	// Logger receives the engine's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Stats count what a Step did.
type Stats struct {
	Records, Archived, Released, Removed int
}

// Engine applies the rules. Not safe for concurrent Steps.
type Engine struct {
	cfg  Config
	log  *slog.Logger
	next uint64
	// changed: regular files by FID and when they last changed (waiting
	// for ArchiveAfter); archived: files the engine saw archived, with
	// their last change (release candidates, remove on delete).
	changed  map[client.FID]int64
	archived map[client.FID]int64
	now      func() time.Time
}

// New returns an engine reading the changelog from its start.
func New(cfg Config) (*Engine, error) {
	if cfg.FS == nil || cfg.HSM == nil || cfg.User == 0 {
		return nil, errors.New("policy: FS, HSM and a changelog User are required")
	}
	if cfg.HighWatermark != 0 && (cfg.LowWatermark <= 0 || cfg.LowWatermark >= cfg.HighWatermark || cfg.HighWatermark > 100) {
		return nil, fmt.Errorf("policy: watermarks low %v high %v: want 0 < low < high <= 100", cfg.LowWatermark, cfg.HighWatermark)
	}
	if cfg.ArchiveID == 0 {
		cfg.ArchiveID = 1
	}
	if cfg.MaxTracked <= 0 {
		cfg.MaxTracked = 1 << 20
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	return &Engine{cfg: cfg, log: lg, next: 1, changed: map[client.FID]int64{}, archived: map[client.FID]int64{}, now: time.Now}, nil
}

// Run steps every interval until ctx ends.
func (e *Engine) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if st, err := e.Step(ctx); err != nil {
			e.log.Warn("policy: step", "err", err)
		} else if st != (Stats{}) {
			e.log.Info("policy: step", "records", st.Records, "archived", st.Archived, "released", st.Released, "removed", st.Removed)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Step reads the new changelog records, clears them, and applies the
// rules once.
func (e *Engine) Step(ctx context.Context) (Stats, error) {
	var st Stats
	if err := e.readChangelog(ctx, &st); err != nil {
		return st, err
	}
	if err := e.archive(ctx, &st); err != nil {
		return st, err
	}
	if err := e.release(ctx, &st); err != nil {
		return st, err
	}
	return st, nil
}

func (e *Engine) readChangelog(ctx context.Context, st *Stats) error {
	fs, root := e.cfg.FS, client.Root()
	var removes []client.FID
	for {
		recs, _, err := fs.ChangelogRead(ctx, root, e.next, 0)
		if err != nil {
			return err
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			st.Records++
			e.next = r.Index + 1
			switch r.Type {
			case mdd.CLCreate, mdd.CLClose, mdd.CLTrunc, mdd.CLSetattr:
				if len(e.changed) < e.cfg.MaxTracked {
					e.changed[r.TFID] = r.Time
				}
				if _, ok := e.archived[r.TFID]; ok {
					e.archived[r.TFID] = r.Time // dirty now, until archived again
				}
			case mdd.CLHSM:
				e.noteHSM(ctx, r.TFID, r.Time)
			case mdd.CLUnlink, mdd.CLRename:
				if _, ok := e.archived[r.TFID]; ok && e.cfg.RemoveDeleted {
					if _, err := fs.HSMState(ctx, root, r.TFID); errors.Is(err, syscall.ENOENT) {
						removes = append(removes, r.TFID)
					}
				}
				if _, err := fs.HSMState(ctx, root, r.TFID); errors.Is(err, syscall.ENOENT) {
					delete(e.changed, r.TFID)
				}
			}
		}
		if err := fs.ChangelogClear(ctx, root, e.cfg.User, e.next-1); err != nil {
			return err
		}
	}
	for _, f := range removes {
		if _, err := e.cfg.HSM.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_REMOVE, e.cfg.ArchiveID, f); err != nil {
			e.log.Warn("policy: remove the archive copy", "fid", f, "err", err)
			continue
		}
		delete(e.archived, f)
		st.Removed++
	}
	return nil
}

// noteHSM records a file the changelog says changed HSM state.
func (e *Engine) noteHSM(ctx context.Context, f client.FID, when int64) {
	h, err := e.cfg.FS.HSMState(ctx, client.Root(), f)
	if err != nil {
		return
	}
	if h.Flags&mdc.HSMArchived != 0 && len(e.archived) < e.cfg.MaxTracked {
		if _, ok := e.archived[f]; !ok {
			e.archived[f] = when
		}
	}
}

// archive submits ARCHIVE for files not changed for ArchiveAfter that are
// not archived (or dirty).
func (e *Engine) archive(ctx context.Context, st *Stats) error {
	if e.cfg.ArchiveAfter <= 0 {
		return nil
	}
	cutoff := e.now().Add(-e.cfg.ArchiveAfter).UnixNano()
	var due []client.FID
	for f, t := range e.changed {
		if t <= cutoff {
			due = append(due, f)
		}
	}
	slices.SortFunc(due, func(a, b client.FID) int { return cmp.Compare(e.changed[a], e.changed[b]) })
	for _, f := range due {
		h, err := e.cfg.FS.HSMState(ctx, client.Root(), f)
		if err != nil {
			delete(e.changed, f) // gone, or not a regular file
			continue
		}
		if h.Flags&(mdc.HSMNoArchive|mdc.HSMReleased|mdc.HSMLost) != 0 || (h.Flags&mdc.HSMArchived != 0 && h.Flags&mdc.HSMDirty == 0) {
			delete(e.changed, f)
			continue
		}
		if _, err := e.cfg.HSM.Submit(ctx, hsmv1.ActionKind_ACTION_KIND_ARCHIVE, e.cfg.ArchiveID, f); err != nil {
			return fmt.Errorf("policy: archive %v: %w", f, err)
		}
		st.Archived++
		e.archived[f] = e.changed[f]
		delete(e.changed, f)
	}
	return nil
}

// used returns the percent of the OSTs' space in use.
func (e *Engine) used(ctx context.Context) (float64, error) {
	s, err := e.cfg.FS.Statfs(ctx)
	if err != nil {
		return 0, err
	}
	if s.Blocks == 0 {
		return 0, nil
	}
	return 100 * float64(s.Blocks-s.Bfree) / float64(s.Blocks), nil
}

// release frees archived, clean files, least recently changed first,
// while the OSTs are above the high watermark, until below the low one.
func (e *Engine) release(ctx context.Context, st *Stats) error {
	if e.cfg.HighWatermark <= 0 {
		return nil
	}
	u, err := e.used(ctx)
	if err != nil || u < e.cfg.HighWatermark {
		return err
	}
	cands := make([]client.FID, 0, len(e.archived))
	for f := range e.archived {
		cands = append(cands, f)
	}
	slices.SortFunc(cands, func(a, b client.FID) int { return cmp.Compare(e.archived[a], e.archived[b]) })
	for _, f := range cands {
		if u < e.cfg.LowWatermark {
			break
		}
		h, err := e.cfg.FS.HSMState(ctx, client.Root(), f)
		if err != nil || h.Flags&mdc.HSMArchived == 0 || h.Flags&(mdc.HSMDirty|mdc.HSMReleased|mdc.HSMNoRelease) != 0 {
			if errors.Is(err, syscall.ENOENT) {
				delete(e.archived, f)
			}
			continue
		}
		if _, err := e.cfg.FS.HSMRelease(ctx, client.Root(), f); err != nil {
			e.log.Info("policy: release", "fid", f, "err", err)
			continue
		}
		st.Released++
		if u, err = e.used(ctx); err != nil {
			return err
		}
	}
	return nil
}
