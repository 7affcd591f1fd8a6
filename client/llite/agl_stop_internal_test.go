package llite

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nacrefs/nacre/client"
	"github.com/nacrefs/nacre/internal/clustertest"
)

// TestAGLStopsAfterProbeOnNonRegular: once aglProbe regular files in a row
// were glimpsed ahead without their sizes staying cached (other workers of
// the page tripped it), no worker takes another entry: a worker whose last
// entry was not a regular file (a directory, or a failed lookup) must stop
// too, not walk on to glimpse more files for nothing.
func TestAGLStopsAfterProbeOnNonRegular(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 1, Clients: 1})
	fsys := c.Mount(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cred := client.Root()
	d, err := fsys.Mkdir(ctx, cred, fsys.Root(), "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	var ents []client.DirEntry
	for i := range 20 {
		name := fmt.Sprint("sub", i)
		if _, err := fsys.Mkdir(ctx, cred, d.FID, name, 0o755); err != nil {
			t.Fatal(err)
		}
		ents = append(ents, client.DirEntry{Name: name})
	}
	m := newMount(fsys, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	sa := newStatAhead(ctx, d.FID, ents)
	defer sa.cancel()
	sa.mu.Lock()
	sa.gmiss = aglProbe // the page's glimpses ahead have given up
	sa.mu.Unlock()
	sa.getattr(ctx, m, cred, "sub0")
	sa.getattr(ctx, m, cred, "sub1")
	m.saWG.Wait()
	if n := m.glimpsesAhead.Load(); n != 0 {
		t.Errorf("%d entries glimpsed ahead after %d misses in a row stopped the page's glimpses ahead", n, aglProbe)
	}
}
