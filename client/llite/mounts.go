package llite

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// Mounted is a Nacre mount of this host as /proc/self/mounts shows it.
type Mounted struct {
	Dir    string // mount point
	Source string // MGSNID[:MGSNID]:/FSNAME, as mounted
}

// Mounts lists the Nacre mounts (fuse.nacre) of this process's mount
// namespace, in /proc/self/mounts order.
func Mounts() ([]Mounted, error) {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Mounted
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[2] != "fuse.nacre" {
			continue
		}
		out = append(out, Mounted{Dir: unescapeMount(fields[1]), Source: unescapeMount(fields[0])})
	}
	return out, sc.Err()
}

// unescapeMount undoes /proc/mounts' octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
