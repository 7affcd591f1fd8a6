package client

import (
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/ldlm"
)

// LockStats exposes the client's lock counters to the tests.
func (fs *FS) LockStats() ldlm.ClientStats { return fs.lk.Stats() }

// SetBeforeCreate sets a function Create calls between taking a missing
// name's negative entry and its RPC (nil: none).
func SetBeforeCreate(f func()) { testBeforeCreate = f }

// SetBeforeRead sets the hook File.ReadAt runs between taking the file's
// objects and reading them (nil: none).
func SetBeforeRead(f func()) { testBeforeRead = f }

// SetBeforeDataOf sets the hook every use of a layout read from the MDT
// runs before it takes the layout's objects (nil: none).
func SetBeforeDataOf(f func(fs *FS, f FID)) { testBeforeDataOf = f }

// MakingName exposes FS.makingName to the tests.
func (fs *FS) MakingName(parent FID, name string) func(error) { return fs.makingName(parent, name) }

// SetBeforeReadNames sets the hook readNames runs before it reads.
func SetBeforeReadNames(f func()) { testBeforeReadNames = f }

// SetBeforeStoreNegative sets the hook a lookup runs between its RPC's
// answer that a name is missing and storing it so.
func SetBeforeStoreNegative(f func(name string)) { testBeforeStoreNegative = f }

// TaintedLen returns how many locks the cache holds tainted.
func (fs *FS) TaintedLen() int {
	fs.cache.mu.Lock()
	defer fs.cache.mu.Unlock()
	return len(fs.cache.tainted)
}

// OpenHandles returns how many opens the client's MDC tracks (put-off
// closes included).
func (fs *FS) OpenHandles() int { return fs.mdc.OpenHandles() }

// SetInConvert sets the hook every MDC lock's conversion runs first.
func SetInConvert(f func(l *ldlm.ClientLock)) { testInConvert = f }

// RPCsSent returns how many requests the client's MDC side has sent.
func (fs *FS) RPCsSent() uint64 { return fs.rpc.Stats().Sent }

// MDCState returns the state of the client's MDC import.
func (fs *FS) MDCState() ptlrpc.ImportState { return fs.mdc.Import().State() }

// SetNoImperativeRecovery makes fs (nil: none) ignore the MGS's word of
// target restarts.
func SetNoImperativeRecovery(fs *FS) { testNoImperativeRecovery.Store(fs) }
