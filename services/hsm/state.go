package hsm

import (
	"fmt"
	"strings"
)

// HSM flags (Lustre's HS_*), as the MDT keeps them.
const (
	FlagExists    uint32 = 0x01
	FlagDirty     uint32 = 0x02
	FlagReleased  uint32 = 0x04
	FlagArchived  uint32 = 0x08
	FlagNoRelease uint32 = 0x10
	FlagNoArchive uint32 = 0x20
	FlagLost      uint32 = 0x40
)

// flagNames are lfs hsm_state's words, in its order.
var flagNames = []struct {
	flag uint32
	name string
}{
	{FlagExists, "exists"}, {FlagDirty, "dirty"}, {FlagReleased, "released"}, {FlagArchived, "archived"},
	{FlagNoRelease, "never_release"}, {FlagNoArchive, "never_archive"}, {FlagLost, "lost_from_hsm"},
}

// FormatState renders flags and archive id as lfs hsm_state does after
// "file: (0x%08x)": "exists archived, archive_id:1"; "" for no flags.
func FormatState(flags, archiveID uint32) string {
	var words []string
	for _, f := range flagNames {
		if flags&f.flag != 0 {
			words = append(words, f.name)
		}
	}
	if len(words) == 0 {
		return ""
	}
	return strings.Join(words, " ") + fmt.Sprintf(", archive_id:%d", archiveID)
}

// ParseFlag returns the flag lfs hsm_set/hsm_clear name with --NAME
// (exists, dirty, archived, lost, norelease, noarchive).
func ParseFlag(name string) (uint32, bool) {
	switch name {
	case "exists":
		return FlagExists, true
	case "dirty":
		return FlagDirty, true
	case "archived":
		return FlagArchived, true
	case "lost":
		return FlagLost, true
	case "norelease":
		return FlagNoRelease, true
	case "noarchive":
		return FlagNoArchive, true
	}
	return 0, false
}
