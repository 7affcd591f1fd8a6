package admin

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/nacrefs/nacre/internal/errs"
	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
)

func TestPage(t *testing.T) {
	items := []string{"a", "b", "c", "d", "e"}
	id := func(s string) string { return s }
	var got []string
	tok := ""
	for range len(items) + 1 {
		p, next, err := page(items, id, 2, tok, "q1")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p...)
		if tok = next; tok == "" {
			break
		}
	}
	if strings.Join(got, "") != "abcde" {
		t.Fatalf("pages gave %v", got)
	}
	// An item gone between pages: the next page starts after where it was.
	_, tok, _ = page(items, id, 2, "", "q1")
	p, _, err := page([]string{"a", "c", "d"}, id, 2, tok, "q1")
	if err != nil || strings.Join(p, "") != "cd" {
		t.Fatalf("after a removal: %v %v", p, err)
	}
	if p, next, _ := page(items, id, 0, "", "q1"); len(p) != 5 || next != "" {
		t.Fatalf("default size: %v %q", p, next)
	}
	for _, c := range []struct {
		name  string
		size  int32
		token string
		query string
		want  string
	}{
		{"negative size", -1, "", "q1", "negative"},
		{"garbage token", 2, "!!", "q1", "not one this API gave out"},
		{"not json", 2, "bm90IGpzb24", "q1", "not one this API gave out"},
		{"other query", 2, tok, "q2", "another query"},
	} {
		_, _, err := page(items, id, c.size, c.token, c.query)
		if !errs.Is(err, errs.Invalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want Invalid saying %q", c.name, err, c.want)
		}
	}
}

func TestMask(t *testing.T) {
	md := (&adminv1.ClusterOverview{}).ProtoReflect().Descriptor()
	full := func() *adminv1.ClusterOverview {
		return &adminv1.ClusterOverview{Fsname: "fs", Total: &adminv1.Usage{TotalBytes: 9, FreeBytes: 3},
			Targets: []*adminv1.TargetStatus{
				{Name: "fs-OST0000", Usage: &adminv1.Usage{TotalBytes: 5, FreeBytes: 1}, Clients: []*adminv1.ClientStats{{Uuid: "c1"}}},
				{Name: "fs-OST0001", Usage: &adminv1.Usage{TotalBytes: 4, FreeBytes: 2}},
			}}
	}
	mask := func(paths ...string) (maskTree, error) {
		return parseMask(md, &fieldmaskpb.FieldMask{Paths: paths}, maskTree{"fsname": nil})
	}
	m, err := mask("targets.name", "targets.usage.total_bytes", "total")
	if err != nil {
		t.Fatal(err)
	}
	o := full()
	m.apply(o.ProtoReflect())
	if o.Fsname != "" || o.Total.GetFreeBytes() != 3 || o.Targets[0].Name != "fs-OST0000" || o.Targets[0].Usage.GetTotalBytes() != 5 ||
		o.Targets[0].Usage.GetFreeBytes() != 0 || o.Targets[0].Clients != nil || o.Targets[1].Usage.GetTotalBytes() != 4 {
		t.Fatalf("masked: %v", o)
	}
	if !m.has("targets", "name") || m.has("targets", "clients") || !m.has("total", "free_bytes") || m.has("servers") {
		t.Fatal("has() disagrees with the mask")
	}
	// "targets" then "targets.name": the whole field stays.
	m, _ = mask("targets", "targets.name")
	o = full()
	m.apply(o.ProtoReflect())
	if len(o.Targets[0].Clients) != 1 || o.Total != nil {
		t.Fatalf("targets kept whole: %v", o)
	}
	// Empty: the default; "*": everything.
	if m, _ := mask(); !m.has("fsname") || m.has("targets") {
		t.Fatal("empty mask is not the default")
	}
	if m, _ := mask("*"); m != nil || !m.has("targets", "clients") {
		t.Fatal("* is not everything")
	}
	for _, bad := range [][]string{{"nothing"}, {"targets.nothing"}, {"fsname.x"}, {"targets.io.ops.ost_write"}, {"*", "fsname"}} {
		if _, err := mask(bad...); !errs.Is(err, errs.Invalid) {
			t.Errorf("mask %v: %v, want Invalid", bad, err)
		}
	}
}
