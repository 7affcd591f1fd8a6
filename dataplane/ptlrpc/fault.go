package ptlrpc

import "sync"

// FailID names a fault-injection point (Lustre's OBD_FAIL_* fail_loc
// values). A handler may name one in HandlerSpec.FailID: when armed, the
// service drops requests for that handler without running it, as Lustre's
// tgt_handler th_fail_id does.
type FailID uint32

// The fault-injection points the core checks.
const (
	// FailDropRequest: the service drops an incoming request (any opcode)
	// before queueing it, as if LNet lost it.
	FailDropRequest FailID = 0x500 + iota
	// FailDropReply: the service runs the handler, keeps the reply for
	// reconstruction as usual, but does not send it.
	FailDropReply
	// FailBulkWriteCorrupt: the server flips a bit in bulk data it GOT,
	// after the transfer and before verifying the checksum.
	FailBulkWriteCorrupt
	// FailBulkReadCorrupt: the server sends a wrong checksum with bulk data
	// it PUT.
	FailBulkReadCorrupt
	// FailDropEarlyReply: the service skips sending an early reply.
	FailDropEarlyReply
	// FailClientDropReply: the client ignores a reply that landed, as if
	// it had been lost.
	FailClientDropReply
)

// Faults is a set of armed fault-injection points. The zero value has none
// armed; a nil *Faults is valid and never fires. Safe for concurrent use.
// Each server or client takes its own (ServiceConfig.Faults,
// ClientConfig.Faults), so several in one process do not trip each other.
type Faults struct {
	mu    sync.Mutex
	armed map[FailID]*faultState // bounded by the number of FailIDs used
}

type faultState struct {
	left  int // fires left; <0 forever
	fired uint64
}

// Arm makes id fire on its next count checks; count < 0 fires until Disarm.
func (f *Faults) Arm(id FailID, count int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.armed == nil {
		f.armed = make(map[FailID]*faultState)
	}
	st := f.armed[id]
	if st == nil {
		st = &faultState{}
		f.armed[id] = st
	}
	st.left = count
}

// Disarm stops id firing.
func (f *Faults) Disarm(id FailID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := f.armed[id]; st != nil {
		st.left = 0
	}
}

// Fired returns how many times id has fired.
func (f *Faults) Fired(id FailID) uint64 {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := f.armed[id]; st != nil {
		return st.fired
	}
	return 0
}

// check reports whether id fires now, consuming one fire.
func (f *Faults) check(id FailID) bool {
	if f == nil || id == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.armed[id]
	if st == nil || st.left == 0 {
		return false
	}
	if st.left > 0 {
		st.left--
	}
	st.fired++
	return true
}
