package rdmadev

import (
	"os"
	"testing"
)

// The answer must agree with sysfs: as many devices as /sys/class/infiniband
// lists (none on a machine without RDMA hardware), each named as there.
func TestListMatchesSysfs(t *testing.T) {
	entries, err := os.ReadDir("/sys/class/infiniband")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, e := range entries {
		want[e.Name()] = true
	}
	got := List()
	if len(got) != len(want) {
		t.Fatalf("List() = %v, sysfs has %v", got, want)
	}
	for _, d := range got {
		if !want[d.Name] {
			t.Fatalf("List() names %s, not in sysfs", d.Name)
		}
	}
}
