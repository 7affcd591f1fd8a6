package layout_test

import (
	"fmt"

	"github.com/nacrefs/nacre/internal/layout"
)

func Example() {
	l := layout.Plain(layout.RAID0{StripeCount: 3, StripeSize: 1 << 20, StripeOffset: layout.AnyOffset,
		Objects: []layout.Object{
			{OSTIndex: 0, Object: layout.FID{Seq: 0x100000000, Oid: 1}},
			{OSTIndex: 1, Object: layout.FID{Seq: 0x100010000, Oid: 1}},
			{OSTIndex: 2, Object: layout.FID{Seq: 0x100020000, Oid: 1}},
		}})
	// A 3 MiB write at 2.5 MiB touches every OST.
	chunks, _ := l.Map(5<<19, 3<<20)
	for _, c := range chunks {
		fmt.Printf("file %7d: ost%d object offset %7d len %7d\n", c.FileOffset, c.OSTIndex, c.ObjOffset, c.Len)
	}
	// After it, the objects hold 2 MiB, 2 MiB and 1.5 MiB.
	size, _ := l.FileSize([][]uint64{{2 << 20, 2 << 20, 3 << 19}})
	fmt.Println("file size", size)
	// Output:
	// file 2621440: ost2 object offset  524288 len  524288
	// file 3145728: ost0 object offset 1048576 len 1048576
	// file 4194304: ost1 object offset 1048576 len 1048576
	// file 5242880: ost2 object offset 1048576 len  524288
	// file size 5767168
}
