package params_test

import (
	"fmt"
	"sync/atomic"

	"github.com/nacrefs/nacre/internal/params"
)

func Example() {
	reg := params.New()
	var inflight [2]atomic.Int64
	for i, dev := range []string{"nacre-OST0000-osc-ffff01", "nacre-OST0001-osc-ffff01"} {
		inflight[i].Store(8)
		unregister, err := reg.Register(params.Int("osc."+dev+".max_rpcs_in_flight", "RPCs in flight",
			inflight[i].Load, func(n int64) error { inflight[i].Store(n); return nil }, 1, 256, nil))
		if err != nil {
			panic(err)
		}
		defer unregister()
	}
	set, err := reg.Set(params.SetOptions{}, params.Assignment{Pattern: "osc.*.max_rpcs_in_flight", Value: "16"})
	fmt.Println(len(set), err)
	_, err = reg.Set(params.SetOptions{}, params.Assignment{Pattern: "osc.*.max_rpcs_in_flight", Value: "1000"})
	fmt.Println(err)
	vals, _ := reg.Get(false, "osc.*.max_rpcs_in_flight")
	for _, v := range vals {
		fmt.Printf("%s=%s\n", v.Name, v.Value)
	}
	// Output:
	// 2 <nil>
	// osc.nacre-OST0000-osc-ffff01.max_rpcs_in_flight=1000: bad value: 1000 is out of range [1, 256]
	// osc.nacre-OST0000-osc-ffff01.max_rpcs_in_flight=16
	// osc.nacre-OST0001-osc-ffff01.max_rpcs_in_flight=16
}
