package fid_test

import (
	"fmt"

	"github.com/nacrefs/nacre/internal/fid"
)

func Example() {
	f, err := fid.Parse("0x200000400:0x2a:0x0")
	if err != nil {
		panic(err)
	}
	b, _ := f.MarshalBinary()
	fmt.Println(f, f.IsNormal(), len(b))
	// Output: [0x200000400:0x2a:0x0] true 16
}
