package ptlrpc

import (
	"context"
	"sync"
	"testing"
	"time"
)

// replyBook is a ReplyStore in memory: the XIDs kept per client.
type replyBook struct {
	mu   sync.Mutex
	kept map[string]map[uint64][]byte
}

func (b *replyBook) SaveReply(client string, xid, _, _ uint64, body []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.kept[client] == nil {
		b.kept[client] = map[uint64][]byte{}
	}
	b.kept[client][xid] = body
}

func (b *replyBook) LoadReply(client string, xid uint64) (uint64, []byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	body, ok := b.kept[client][xid]
	return 1, body, ok
}

func (b *replyBook) ForgetReplies(client string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.kept, client)
}

func (b *replyBook) count(client string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.kept[client])
}

// TestReplyNotKeptForClientGoneAsItIsSaved: a client evicted (or
// disconnected) as its request's reply is being kept loses that reply
// with the others. The handler looked at the export, found it live, and
// kept the reply after the eviction had forgotten the client's replies:
// the record stayed for good, one more for each client that went so.
func TestReplyNotKeptForClientGoneAsItIsSaved(t *testing.T) {
	// Set before the service starts: its goroutines read it.
	evicted := make(chan struct{})
	var once sync.Once
	testHookKeepReply = func(e *Export) {
		once.Do(func() {
			go func() {
				defer close(evicted)
				if err := e.target.Evict(e.uuid); err != nil {
					t.Error(err)
				}
			}()
			// Let the eviction run its course if it can.
			select {
			case <-evicted:
			case <-time.After(200 * time.Millisecond):
			}
		})
	}
	t.Cleanup(func() { testHookKeepReply = nil })
	re := newRecoveryEnv(t, func(c *ServiceConfig) {
		wrapInc(c, func(r *Request) func() { r.KeepReply(); return nil })
	})
	book := &replyBook{kept: map[string]map[uint64][]byte{}}
	re.tgt.Close(context.Background())
	tgt, err := re.ts.NewTarget(TargetConfig{Name: "nacre-MDT0000", LastTransno: 100, Replies: book, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	re.tgt = tgt
	a := re.client(t, "a", rplPortal, true)
	if err := <-do(a); err != nil {
		t.Fatal(err)
	}
	<-evicted
	if n := book.count("a"); n != 0 {
		t.Fatalf("%d replies kept for a client evicted", n)
	}
}
