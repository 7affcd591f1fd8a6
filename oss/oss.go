// Package oss assembles an object storage server: one connection-oriented
// PtlRPC service on the OST I/O portal serving every OST of the process,
// each an OFD over its own OSD device, with requests routed to the OFD of
// the export they name. Lustre runs one ost_io service per OSS the same
// way. Process wiring (target directories, MGS registration, LNet) is the
// server package's.
package oss

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/oss/ofd"
	"github.com/nacrefs/nacre/oss/osd"
)

// Config configures an OSS.
type Config struct {
	// LNet carries the service.
	LNet *lnet.LNet
	// Portal is the service's request portal; 0 means ptlrpc.OSTIOPortal.
	Portal uint32
	// MinThreads and MaxThreads size the handler pool; 0 means 8 and 64.
	MinThreads, MaxThreads int
	// CallbackTimeout and EvictTimeout: 0 means the defaults.
	CallbackTimeout, EvictTimeout time.Duration
	// RecoveryWindow is the OSTs' (see ofd.Config): 0 means the default,
	// negative none.
	RecoveryWindow time.Duration
	// Faults are the service's armed fault-injection points; nil means
	// none.
	Faults *ptlrpc.Faults
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
}

// OSS serves the OSTs of one process. Safe for concurrent use.
type OSS struct {
	cfg Config
	log *slog.Logger
	ts  *ptlrpc.TargetSet
	svc *ptlrpc.Service
	cli *ptlrpc.Client

	mu   sync.Mutex // guards ofds
	ofds map[*ptlrpc.Target]*ofdEntry
}

type ofdEntry struct {
	ofd      *ofd.OFD
	handlers map[wire.Opcode]ptlrpc.Handler
}

// New starts the OSS service with no OSTs; AddOST adds them.
func New(cfg Config) (*OSS, error) {
	if cfg.LNet == nil {
		return nil, errors.New("oss: no LNet")
	}
	if cfg.Portal == 0 {
		cfg.Portal = ptlrpc.OSTIOPortal
	}
	if cfg.MinThreads <= 0 {
		cfg.MinThreads = 8
	}
	if cfg.MaxThreads <= 0 {
		cfg.MaxThreads = max(64, cfg.MinThreads)
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	s := &OSS{cfg: cfg, log: lg, ts: ptlrpc.NewTargetSet(), ofds: make(map[*ptlrpc.Target]*ofdEntry),
		cli: ptlrpc.NewClient(cfg.LNet, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.LDLMCBReplyPortal, Logger: lg})}
	handlers := make(map[wire.Opcode]ptlrpc.HandlerSpec, len(ofd.Flags))
	for op, flags := range ofd.Flags {
		handlers[op] = ptlrpc.HandlerSpec{Flags: flags, Fn: func(ctx context.Context, r *ptlrpc.Request) ([]byte, int32) {
			e := s.entry(r.Export())
			if e == nil {
				return nil, -int32(syscall.ENODEV)
			}
			return e.handlers[op](ctx, r)
		}}
	}
	svc, err := ptlrpc.NewService(cfg.LNet, ptlrpc.ServiceConfig{Name: "ost_io", RequestPortal: cfg.Portal, Targets: s.ts,
		ConnectOp: wire.OSTConnect, DisconnectOp: wire.OSTDisconnect, MinThreads: cfg.MinThreads, MaxThreads: cfg.MaxThreads,
		Handlers: handlers, Faults: cfg.Faults, Logger: lg})
	if err != nil {
		return nil, err
	}
	s.svc = svc
	return s, nil
}

func (s *OSS) entry(e *ptlrpc.Export) *ofdEntry {
	if e == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ofds[e.Target()]
}

// AddOST starts serving dev as the OST named name (its label) with uuid.
func (s *OSS) AddOST(dev osd.Device, name, uuid string) (*ofd.OFD, error) {
	o, err := ofd.New(ofd.Config{Device: dev, Targets: s.ts, Name: name, UUID: uuid, Client: s.cli,
		CallbackTimeout: s.cfg.CallbackTimeout, EvictTimeout: s.cfg.EvictTimeout, RecoveryWindow: s.cfg.RecoveryWindow, Logger: s.log})
	if err != nil {
		return nil, fmt.Errorf("oss: %s: %w", name, err)
	}
	s.mu.Lock()
	s.ofds[o.Target()] = &ofdEntry{ofd: o, handlers: o.Handlers()}
	s.mu.Unlock()
	return o, nil
}

// Threads returns the least and the most handler threads of the service.
func (s *OSS) Threads() (minThreads, maxThreads int) { return s.cfg.MinThreads, s.cfg.MaxThreads }

// Service returns the OSS's PtlRPC service (stats, NRS).
func (s *OSS) Service() *ptlrpc.Service { return s.svc }

// OSTs returns the OFDs served, by target name.
func (s *OSS) OSTs() []*ofd.OFD {
	s.mu.Lock()
	out := make([]*ofd.OFD, 0, len(s.ofds))
	for _, e := range s.ofds {
		out = append(out, e.ofd)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *ofd.OFD) int { return strings.Compare(a.Target().Name(), b.Target().Name()) })
	return out
}

// Close stops the service, then every OFD. The devices stay open for
// their owner to close.
func (s *OSS) Close(ctx context.Context) error {
	err := s.svc.Close(ctx)
	s.mu.Lock()
	ofds := s.ofds
	s.ofds = map[*ptlrpc.Target]*ofdEntry{}
	s.mu.Unlock()
	for _, e := range ofds {
		err = errors.Join(err, e.ofd.Close(ctx))
	}
	return err
}
