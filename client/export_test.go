package client

import "github.com/nacrefs/nacre/ldlm"

// LockStats exposes the client's lock counters to the tests.
func (fs *FS) LockStats() ldlm.ClientStats { return fs.lk.Stats() }

// MakingName exposes FS.makingName to the tests.
func (fs *FS) MakingName(parent FID, name string) func(error) { return fs.makingName(parent, name) }
