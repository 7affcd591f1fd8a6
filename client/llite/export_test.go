package llite

import "github.com/nacrefs/nacre/client"

// KnownNoCap reports whether the mount takes f to have no
// security.capability without asking the MDT.
func (s *Server) KnownNoCap(f client.FID) bool { return s.m.knownNoCap(f) }

// StatAheads returns how many lookups the mount ran ahead of go-fuse's.
func (s *Server) StatAheads() uint64 { return s.m.statAheads.Load() }

// GlimpsesAhead returns how many files the mount glimpsed ahead of the
// kernel's GETATTRs (AGL).
func (s *Server) GlimpsesAhead() uint64 { return s.m.glimpsesAhead.Load() }

// WorkersAhead returns how many statahead workers (lookups and glimpses
// ahead) hold a token now.
func (s *Server) WorkersAhead() int { return len(s.m.statAhead) }

// KernelNegative reports whether the mount counts name in the directory
// with inode number parent as a negative entry given to the kernel.
func (s *Server) KernelNegative(parent uint64, name string) bool {
	s.m.n.mu.Lock()
	defer s.m.n.mu.Unlock()
	_, ok := s.m.n.mu.negs[negKey{parent, name}]
	return ok
}
