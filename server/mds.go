package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	lwire "github.com/nacrefs/nacre/lnet/wire"
	"github.com/nacrefs/nacre/mds/mdd"
	"github.com/nacrefs/nacre/mds/mdt"
	"github.com/nacrefs/nacre/mgs"
	mgsv1 "github.com/nacrefs/nacre/proto/nacre/mgs/v1"
)

// mdtDir is where an MDT keeps its namespace store, under the target
// directory.
const mdtDir = "mdt"

// mdtBackend names the MDT's store in its identity.
const mdtBackend = "pebble"

// DefaultConfigInterval is how often an MDT reads the file system's OST
// list and pools from the MGS besides when the MGS's watch reports a
// change (a broken stream costs at most this long).
const DefaultConfigInterval = 10 * time.Second

// FormatMDT formats dir as an MDT: its identity and an empty namespace
// (the root directory).
func FormatMDT(ctx context.Context, dir string, id TargetIdentity) (TargetIdentity, error) {
	id.Kind = mgs.KindMDT
	if id.Backend == "" || id.Backend == "file" {
		id.Backend = mdtBackend
	}
	if id.Backend != mdtBackend {
		return id, fmt.Errorf("mkfs %s: an MDT's backend is %s, not %s", dir, mdtBackend, id.Backend)
	}
	if id.Index != 0 {
		return id, fmt.Errorf("mkfs %s: MDT index %d: only MDT0 is supported yet", dir, id.Index)
	}
	return Mkfs(dir, id, mdtDir, func(store string, _ TargetIdentity) error {
		cfg := mdd.DefaultConfig(store)
		cfg.SyncInterval = 0
		s, err := mdd.Open(cfg)
		if err != nil {
			return err
		}
		return s.Close()
	})
}

// replayBarrierDir is where a target's replay_barrier saves its store,
// under the target directory.
const replayBarrierDir = "replay_barrier"

// RestoreReplayBarrier puts the target in dir (an MDT or an OST), stopped,
// back as it was at its replay_barrier (mdt.*.replay_barrier,
// obdfilter.*.replay_barrier): its store is replaced by the copy the
// barrier saved, as if every change after it had been lost in a crash.
// For tests of recovery. A target some process serves is refused (EBUSY):
// its store would go from under it.
func RestoreReplayBarrier(dir string) error {
	release, err := lockTarget(dir)
	if err != nil {
		return err
	}
	defer release()
	return restoreReplayBarrier(dir)
}

// restoreReplayBarrier is RestoreReplayBarrier with dir's target lock held.
func restoreReplayBarrier(dir string) error {
	saved := filepath.Join(dir, replayBarrierDir)
	if _, err := os.Stat(saved); err != nil {
		return fmt.Errorf("server: %s: no replay barrier: %w", dir, err)
	}
	store := filepath.Join(dir, mdtDir)
	if _, err := os.Stat(store); err != nil {
		store = filepath.Join(dir, osdDir)
	}
	if err := os.RemoveAll(store); err != nil {
		return fmt.Errorf("server: %s: %w", dir, err)
	}
	if err := os.Rename(saved, store); err != nil {
		return fmt.Errorf("server: %s: %w", dir, err)
	}
	return nil
}

// startMDT serves the MDT in dir and registers it; its OST list and pools
// come from the MGS's configuration, read at registration and every
// ConfigInterval after.
func (s *Storage) startMDT(ctx context.Context, cfg ServerConfig, dir string, id TargetIdentity, nids []string, lg *slog.Logger) error {
	if id.Backend != mdtBackend {
		return fmt.Errorf("server: %s: MDT backend %q", dir, id.Backend)
	}
	m, err := s.MDS.AddMDT(mdt.Config{Name: id.Label, UUID: id.UUID, Index: id.Index,
		Store: mdd.Config{Dir: filepath.Join(dir, mdtDir), MustExist: true, Logger: lg}, AwaitOSTs: true,
		CallbackTimeout: cfg.CallbackTimeout, EvictTimeout: cfg.EvictTimeout, RecoveryWindow: cfg.RecoveryWindow, Logger: lg})
	if err != nil {
		return fmt.Errorf("server: %s: %w", dir, err)
	}
	s.registerMDT(m, id, dir)
	abs, _ := filepath.Abs(dir)
	reg, err := Register(ctx, id, nids, abs, s.StatusPort(), lg)
	if err != nil {
		return err
	}
	s.regs = append(s.regs, reg)
	applyConfig(m, reg.Config(), lg)
	every := cfg.ConfigInterval
	if every <= 0 {
		every = DefaultConfigInterval
	}
	wctx, cancel := context.WithCancel(context.Background())
	s.wg.Go(func() {
		<-s.stop
		cancel()
	})
	s.wg.Go(func() {
		reg.Watch(wctx, every, func(c *mgsv1.ClientConfig) { applyConfig(m, c, lg) }, func(kind mgsv1.TargetKind, idx uint32) {
			if kind == mgsv1.TargetKind_TARGET_KIND_OST {
				m.OSTUp(idx)
			}
		})
	})
	return nil
}

// applyConfig gives an MDT the OSTs (those up) and pools of the file
// system's configuration.
func applyConfig(m *mdt.MDT, c *mgsv1.ClientConfig, lg *slog.Logger) {
	if c == nil {
		return
	}
	osts, pools := mdtConfig(c)
	if err := m.SetOSTs(osts); err != nil {
		lg.Warn("MDT: OST list", "mdt", m.Name(), "err", err)
	}
	m.SetPools(pools)
}

// mdtConfig extracts an MDT's OST list and pools from a configuration:
// OSTs that are up, each served at its NIDs (failover NIDs after), by the
// Lustre process id.
func mdtConfig(c *mgsv1.ClientConfig) ([]mdt.OST, map[string][]uint32) {
	var osts []mdt.OST
	for _, t := range c.GetTargets() {
		if t.GetKind() != mgsv1.TargetKind_TARGET_KIND_OST || t.GetState() != mgsv1.TargetState_TARGET_STATE_UP {
			continue
		}
		o := mdt.OST{Index: t.GetIndex(), Name: t.GetName()}
		for _, n := range append(append([]string(nil), t.GetNids()...), t.GetFailoverNids()...) {
			nid, err := lwire.ParseNID(n)
			if err != nil {
				continue
			}
			o.Servers = append(o.Servers, lwire.ProcessID{NID: nid, PID: lwire.PIDLustre})
		}
		if len(o.Servers) > 0 {
			osts = append(osts, o)
		}
	}
	pools := map[string][]uint32{}
	for _, p := range c.GetPools() {
		pools[p.GetName()] = p.GetOsts()
	}
	return osts, pools
}
