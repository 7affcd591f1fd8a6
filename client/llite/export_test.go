package llite

import "github.com/nacrefs/nacre/client"

// KnownNoCap reports whether the mount takes f to have no
// security.capability without asking the MDT.
func (s *Server) KnownNoCap(f client.FID) bool { return s.m.knownNoCap(f) }
