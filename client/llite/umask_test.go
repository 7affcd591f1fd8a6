package llite

import (
	"log/slog"
	"sync"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nacrefs/nacre/client"
)

// umaskFS stands for go-fuse's bridge behind rawFS: its Create builds the
// node's context as the bridge does and reads the umask the node would
// send. The first create is in when first closes, and reads its umask
// once the second is done.
type umaskFS struct {
	fuse.RawFileSystem
	m             *mount
	first, second chan struct{}
	mu            sync.Mutex
	got           map[uint32]uint32 // umask seen, by the umask the caller had
}

func (u *umaskFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	if name == "first" {
		close(u.first)
		<-u.second
	} else {
		defer close(u.second)
	}
	got := u.m.umaskOf(&fuse.Context{Caller: in.Caller, Cancel: cancel})
	u.mu.Lock()
	u.got[in.Umask] = got
	u.mu.Unlock()
	return fuse.OK
}

// TestUmaskOfCallersWithoutPid: the kernel gives pid 0 to every caller
// outside the FUSE daemon's pid namespace (a mount served from a
// container, used from the host). Two such creates in flight at once each
// get their own umask: keyed by pid, the second's replaced the first's,
// and a file of a caller with umask 077 was made as one with umask 000
// asked.
func TestUmaskOfCallersWithoutPid(t *testing.T) {
	m := newMount(&client.FS{}, nil, slog.New(slog.DiscardHandler))
	inner := &umaskFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), m: m,
		first: make(chan struct{}), second: make(chan struct{}), got: map[uint32]uint32{}}
	raw := &rawFS{RawFileSystem: inner, m: m}
	var wg sync.WaitGroup
	for _, c := range []struct {
		name  string
		umask uint32
	}{{"first", 0o077}, {"second", 0o000}} {
		in := &fuse.CreateIn{Umask: c.umask}
		in.Caller.Pid = 0
		wg.Go(func() { raw.Create(make(chan struct{}), in, c.name, &fuse.CreateOut{}) })
		if c.name == "first" {
			<-inner.first
		}
	}
	wg.Wait()
	for _, want := range []uint32{0o077, 0o000} {
		if got := inner.got[want]; got != want {
			t.Errorf("a create with umask %#o went with umask %#o", want, got)
		}
	}
}
