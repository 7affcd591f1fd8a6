package ldlm_test

import (
	"fmt"

	"github.com/nacrefs/nacre/ldlm"
)

// A lock daemon's view: a reader holds an extent, a writer asks for part of
// it. The namespace says whom to call back; when the reader cancels, it
// says whom to tell that the writer's lock is granted.
func Example() {
	cfg := ldlm.DefaultConfig()
	cfg.Name = "nacre-OST0000"
	ns, err := ldlm.New(cfg)
	if err != nil {
		panic(err)
	}
	obj := ldlm.Resource{ID: ldlm.ResIDOfFID(0x100000000, 0x2a, 0), Type: ldlm.TypeExtent}

	r, _ := ns.Enqueue(ldlm.Request{Resource: obj, Mode: ldlm.PR, Owner: "client-1",
		Policy: ldlm.Policy{Extent: ldlm.Extent{Start: 0, End: 1<<20 - 1}}})
	fmt.Println("client-1:", r.Lock.State, r.Lock.Mode, r.Lock.Policy.Extent)

	w, _ := ns.Enqueue(ldlm.Request{Resource: obj, Mode: ldlm.PW, Owner: "client-2",
		Policy: ldlm.Policy{Extent: ldlm.Extent{Start: 4096, End: 8191}}})
	fmt.Println("client-2:", w.Lock.State, w.Lock.Mode, w.Lock.Policy.Extent)
	for _, b := range w.Blocking {
		fmt.Println("send blocking AST to", b.Lock.Owner, "for lock", b.Lock.Handle)
	}

	eff, _ := ns.Cancel(r.Lock.Handle, "client-1")
	for _, g := range eff.Granted {
		fmt.Println("send completion AST to", g.Owner, "for lock", g.Handle, g.Mode, g.Policy.Extent)
	}
	// Output:
	// client-1: granted PR [0,EOF]
	// client-2: waiting PW [4096,8191]
	// send blocking AST to client-1 for lock 0x1
	// send completion AST to client-2 for lock 0x2 PW [0,EOF]
}
