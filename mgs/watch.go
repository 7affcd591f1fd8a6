package mgs

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/nacrefs/nacre/internal/errs"
)

// EventType says whether an object was written or removed.
type EventType uint8

// Event types.
const (
	EventPut EventType = iota + 1
	EventDelete
)

// Liveness is a target going up (its lease key appeared) or down (the lease
// expired or was revoked).
type Liveness struct {
	Kind  Kind
	Index uint32
	Up    bool
}

// Event is one change to a filesystem's configuration. Exactly one of the
// pointers is set. On delete only the identity fields are filled.
type Event struct {
	Revision   int64
	Type       EventType
	Filesystem *Filesystem
	Target     *Target
	Liveness   *Liveness
	Pool       *Pool
	Param      *Param
}

// watchRetry is how long Watch waits before re-establishing a broken etcd watch.
const watchRetry = 500 * time.Millisecond

// Watch calls fn for every change to fsname with revision >= startRev (0:
// from now), in revision order, until ctx is done or fn returns an error.
// fn runs on the caller's goroutine, so a slow consumer slows the watch
// instead of growing a queue. If etcd's watch breaks (member lost, leader
// change), Watch resumes from the last delivered revision + 1, so nothing is
// skipped or repeated. Compacted if startRev is older than etcd's history:
// the caller must take a fresh snapshot with GetConfig.
func (s *Store) Watch(ctx context.Context, fsname string, startRev int64, fn func(Event) error) error {
	if err := ValidateFSName(fsname); err != nil {
		return err
	}
	next := startRev
	if next <= 0 {
		// Pin "now" to a revision, so a watch that breaks before its first
		// event still resumes from where it began.
		cctx, cancel := s.call(ctx)
		resp, err := s.cli.Get(cctx, s.fsKey(fsname), clientv3.WithCountOnly())
		cancel()
		if err != nil {
			return s.etcdErr("watch "+fsname, err)
		}
		next = resp.Header.Revision + 1
	}
	for {
		opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(next)}
		// Require a leader so a member cut off from the quorum ends the watch
		// (and we resume elsewhere) instead of silently serving nothing.
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.cli.Watch(wctx, s.prefix, opts...)
		last, err := s.drain(wch, fsname, fn)
		cancel()
		if last > 0 {
			next = last + 1
		}
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return errs.Errorf(errs.Canceled, "watch %s: %w", fsname, ctx.Err())
		}
		s.log.Info("etcd watch broke; resuming", "fsname", fsname, "from_revision", next)
		select {
		case <-ctx.Done():
			return errs.Errorf(errs.Canceled, "watch %s: %w", fsname, ctx.Err())
		case <-time.After(watchRetry):
		}
	}
}

// drain delivers one etcd watch channel's events. It returns the last revision
// delivered and an error that ends the whole watch (fn's, or compaction);
// a nil error means the channel closed and the watch may resume.
func (s *Store) drain(wch clientv3.WatchChan, fsname string, fn func(Event) error) (int64, error) {
	var last int64
	for resp := range wch {
		if resp.CompactRevision != 0 {
			return last, errs.Errorf(errs.Compacted, "watch %s: revision %d is compacted (history starts at %d); fetch the configuration again", fsname, resp.CompactRevision-1, resp.CompactRevision)
		}
		if err := resp.Err(); err != nil {
			// No leader, member gone, stream canceled: all transient. The
			// caller resumes from last+1 once etcd answers again.
			s.log.Warn("etcd watch interrupted", "fsname", fsname, "no_leader", errors.Is(err, rpctypes.ErrNoLeader), "err", err)
			return last, nil
		}
		for _, ev := range resp.Events {
			e, ok := s.toEvent(fsname, ev)
			if ok {
				if err := fn(e); err != nil {
					return last, err
				}
			}
			last = ev.Kv.ModRevision
		}
	}
	return last, nil
}

// toEvent turns one etcd event into a filesystem event, or false when the key
// is of another filesystem or unknown to this version.
func (s *Store) toEvent(fsname string, ev *clientv3.Event) (Event, bool) {
	key := strings.TrimPrefix(string(ev.Kv.Key), s.prefix)
	e := Event{Revision: ev.Kv.ModRevision, Type: EventPut}
	if ev.Type == mvccpb.DELETE {
		e.Type = EventDelete
	}
	area, rest, _ := strings.Cut(key, "/")
	value := ev.Kv.Value
	if e.Type == EventDelete && ev.PrevKv != nil {
		value = ev.PrevKv.Value
	}
	switch area {
	case "filesystems":
		if rest != fsname {
			return e, false
		}
		fs := Filesystem{Name: fsname}
		if e.Type == EventPut {
			var err error
			if fs, err = decode[Filesystem](key, value); err != nil {
				s.log.Error("skipping corrupt record in watch", "key", key, "err", err)
				return e, false
			}
		}
		fs.Revision = e.Revision
		e.Filesystem = &fs
	case "targets", "live":
		fs, name, _ := strings.Cut(rest, "/")
		if fs != fsname {
			return e, false
		}
		k, idx, err := ParseTargetName("", name)
		if err != nil {
			return e, false
		}
		if area == "live" {
			e.Liveness = &Liveness{Kind: k, Index: idx, Up: e.Type == EventPut}
			return e, true
		}
		t := Target{FSName: fsname, Kind: k, Index: idx}
		if len(value) > 0 {
			if t, err = decode[Target](key, value); err != nil {
				s.log.Error("skipping corrupt record in watch", "key", key, "err", err)
				return e, false
			}
		}
		t.Revision = e.Revision
		e.Target = &t
	case "pools":
		fs, name, _ := strings.Cut(rest, "/")
		if fs != fsname {
			return e, false
		}
		p := Pool{FSName: fsname, Name: name}
		if len(value) > 0 {
			var err error
			if p, err = decode[Pool](key, value); err != nil {
				s.log.Error("skipping corrupt record in watch", "key", key, "err", err)
				return e, false
			}
		}
		if e.Type == EventDelete {
			p.OSTs = nil
		}
		p.Revision = e.Revision
		e.Pool = &p
	case "params":
		pn, err := ParseParamName(rest)
		if err != nil || !pn.MatchesFS(fsname) {
			return e, false
		}
		p := Param{Name: rest, Revision: e.Revision}
		if e.Type == EventPut {
			p.Value = string(ev.Kv.Value)
		}
		e.Param = &p
	default:
		return e, false
	}
	return e, true
}

// WatchFilesystems calls fn with every filesystem there is, then with each
// one created (or written again) later, until ctx is done. fn runs on the
// caller's goroutine and may see a filesystem more than once: after etcd's
// watch breaks (member lost, compaction) the list is read again, so none
// created meanwhile is missed. It returns only when ctx is done.
func (s *Store) WatchFilesystems(ctx context.Context, fn func(Filesystem)) error {
	prefix := s.prefix + "filesystems/"
	for {
		cctx, cancel := s.call(ctx)
		resp, err := s.cli.Get(cctx, prefix, clientv3.WithPrefix())
		cancel()
		if err != nil {
			err = s.etcdErr("watch filesystems", err)
		} else {
			for _, kv := range resp.Kvs {
				if fs, err := decode[Filesystem](string(kv.Key), kv.Value); err == nil {
					fs.Revision = kv.ModRevision
					fn(fs)
				}
			}
			wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			wch := s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1), clientv3.WithFilterDelete())
			for wr := range wch {
				if err = wr.Err(); err != nil {
					break
				}
				for _, ev := range wr.Events {
					if fs, err := decode[Filesystem](string(ev.Kv.Key), ev.Kv.Value); err == nil {
						fs.Revision = ev.Kv.ModRevision
						fn(fs)
					}
				}
			}
			wcancel()
		}
		if ctx.Err() != nil {
			return errs.Errorf(errs.Canceled, "watch filesystems: %w", ctx.Err())
		}
		s.log.Info("filesystem watch broke; listing again", "err", err)
		select {
		case <-ctx.Done():
			return errs.Errorf(errs.Canceled, "watch filesystems: %w", ctx.Err())
		case <-time.After(watchRetry):
		}
	}
}
