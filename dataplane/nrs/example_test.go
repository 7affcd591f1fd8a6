package nrs_test

import (
	"context"
	"fmt"

	"github.com/nacrefs/nacre/dataplane/nrs"
	"github.com/nacrefs/nacre/dataplane/ptlrpc/wire"
	lwire "github.com/nacrefs/nacre/lnet/wire"
)

func Example() {
	h, err := nrs.NewHead(nrs.Config{MaxQueued: 256, Policy: "tbf"})
	if err != nil {
		panic(err)
	}
	defer h.Close()
	// What an administrator sends with lctl set_param ...nrs_tbf_rule=.
	for _, spec := range []string{
		"start dd jobid={dd.*} rate=100",
		"start login nid={192.168.1.[1-16]@tcp} rate=500 burst=8 rank=dd",
		"change default rate=5000",
		"start typo jobid={x} rate=0",
	} {
		cmd, err := nrs.ParseRule(spec)
		if err == nil {
			err = h.Apply(cmd)
		}
		if err != nil {
			fmt.Println(err)
		}
	}
	// What the service's LNet callback does for each request.
	for _, r := range []struct{ nid, job string }{
		{"192.168.1.7@tcp", "dd.0"}, // login: its rule is ranked first
		{"10.0.0.9@tcp", "dd.1"},
		{"10.0.0.9@tcp", "dd.2"}, // the dd rule keys classes by job id
		{"10.0.0.9@tcp", "tar.3"},
	} {
		h.Enqueue(&nrs.Item{NID: lwire.MustParseNID(r.nid), JobID: r.job, Opcode: wire.OSTWrite})
	}
	for _, ri := range h.Rules() {
		fmt.Println(ri)
	}
	// What each handler goroutine does.
	it, err := h.Get(context.Background())
	if err != nil {
		panic(err)
	}
	_ = it.Value // the request
	fmt.Println("queued:", h.Len())
	// Output:
	// nrs: rule "typo": rate 0: must be positive
	// login nid={192.168.1.[1-16]@tcp} rate=500 burst=8 classes=1 queued=1 dispatched=0
	// dd jobid={dd.*} rate=100 burst=3 classes=2 queued=2 dispatched=0
	// default * rate=5000 burst=3 classes=1 queued=1 dispatched=0
	// queued: 3
}
