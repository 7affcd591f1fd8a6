package mdc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nacrefs/nacre/client/mdc"
	"github.com/nacrefs/nacre/dataplane/ptlrpc"
	"github.com/nacrefs/nacre/lnet"
	lwire "github.com/nacrefs/nacre/lnet/wire"
	"github.com/nacrefs/nacre/mds/mdd"
	"github.com/nacrefs/nacre/mds/mdt"

	_ "github.com/nacrefs/nacre/lnd/lolnd"
)

// An MDT and its client in one process, over LNet's loopback: make a
// directory, a file in it, look it up, list the directory.
func Example() {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir, _ := os.MkdirTemp("", "mdt")
	defer os.RemoveAll(dir)

	lcfg := lnet.DefaultConfig()
	lcfg.Logger = quiet
	ln, err := lnet.New(ctx, lcfg) // 0@lo only
	if err != nil {
		panic(err)
	}
	defer ln.Close(ctx)
	srv, err := mdt.NewServer(mdt.ServerConfig{LNet: ln, Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer srv.Close(ctx)
	if _, err := srv.AddMDT(mdt.Config{Name: "nacre-MDT0000", Store: mdd.Config{Dir: filepath.Join(dir, "mdt0")}}); err != nil {
		panic(err)
	}

	c := ptlrpc.NewClient(ln, ptlrpc.ClientConfig{ReplyPortal: ptlrpc.MDCReplyPortal, Logger: quiet})
	imp, err := c.NewImport(mdc.ImportConfig("nacre-MDT0000", lwire.ProcessID{NID: lwire.LoNID, PID: ln.PID()}))
	if err != nil {
		panic(err)
	}
	defer imp.Close(ctx)
	m := mdc.New(imp, nil)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	root, _ := m.GetRoot(ctx)
	d, err := m.Mkdir(ctx, mdc.Root(), root, "home", 0o755)
	if err != nil {
		panic(err)
	}
	if _, _, err := m.Create(ctx, mdc.Root(), d.FID, "notes.txt", 0o644, nil); err != nil {
		panic(err)
	}
	a, _ := m.Lookup(ctx, mdc.Root(), d.FID, "notes.txt")
	fmt.Printf("notes.txt: mode %o, %d link\n", a.Mode, a.Nlink)
	_, err = m.Lookup(ctx, mdc.Root(), d.FID, "missing")
	fmt.Println("missing:", err != nil && errors.Is(err, syscall.ENOENT))
	for e, err := range m.Readdir(ctx, mdc.Root(), d.FID) {
		if err != nil {
			panic(err)
		}
		fmt.Println(e.Name)
	}
	// Output:
	// notes.txt: mode 100644, 1 link
	// missing: true
	// .
	// ..
	// notes.txt
}
