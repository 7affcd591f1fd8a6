package ofd

import (
	"testing"

	"github.com/nacrefs/nacre/oss/osd"
	ostv1 "github.com/nacrefs/nacre/proto/nacre/ost/v1"
)

// TestAttrValidIsAttrMask: the wire's valid bits are osd.AttrMask as they
// are (AttrToWire and attrFromWire convert by value), and clients name them
// by the proto enum; the two lists must not drift apart.
func TestAttrValidIsAttrMask(t *testing.T) {
	pairs := []struct {
		wire ostv1.AttrValid
		mask osd.AttrMask
	}{
		{ostv1.AttrValid_ATTR_VALID_SIZE, osd.AttrSize},
		{ostv1.AttrValid_ATTR_VALID_BLOCKS, osd.AttrBlocks},
		{ostv1.AttrValid_ATTR_VALID_MTIME, osd.AttrMtime},
		{ostv1.AttrValid_ATTR_VALID_ATIME, osd.AttrAtime},
		{ostv1.AttrValid_ATTR_VALID_CTIME, osd.AttrCtime},
		{ostv1.AttrValid_ATTR_VALID_MODE, osd.AttrMode},
		{ostv1.AttrValid_ATTR_VALID_UID, osd.AttrUID},
		{ostv1.AttrValid_ATTR_VALID_GID, osd.AttrGID},
		{ostv1.AttrValid_ATTR_VALID_PARENT, osd.AttrParent},
		{ostv1.AttrValid_ATTR_VALID_LAYOUT_VERSION, osd.AttrLayoutVersion},
	}
	var all osd.AttrMask
	for _, p := range pairs {
		if uint32(p.wire) != uint32(p.mask) {
			t.Errorf("%v = %#x, osd mask %#x", p.wire, uint32(p.wire), uint32(p.mask))
		}
		all |= p.mask
	}
	if all != osd.AttrAll {
		t.Errorf("the enum covers %#x of osd.AttrAll %#x", uint32(all), uint32(osd.AttrAll))
	}
	if n := len(ostv1.AttrValid_name) - 1; n != len(pairs) { // less UNSPECIFIED
		t.Errorf("AttrValid has %d bits, the test pairs %d", n, len(pairs))
	}
	// A round trip keeps the bits a client may set.
	w := AttrToWire(osd.Attr{Mtime: fromNS(5), Valid: osd.AttrMtime | osd.AttrMode})
	if got := attrFromWire(w).Valid; got != osd.AttrMtime|osd.AttrMode {
		t.Errorf("round trip valid %#x", uint32(got))
	}
}
