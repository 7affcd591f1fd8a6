package llite_test

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nacrefs/nacre/internal/clustertest"
	"github.com/nacrefs/nacre/internal/params"
)

// TestJobStats: dd writes a known number of bytes through the mount; the
// OSTs' job_stats attribute exactly those bytes to dd's job id
// (procname_uid: "dd.0"), and a reader's bytes to its own.
func TestJobStats(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{OSTs: 2})
	srv := mountT(t, c, 0)
	f := filepath.Join(srv.Dir(), "jobs")
	out, err := exec.Command("dd", "if=/dev/zero", "of="+f, "bs=1M", "count=6", "conv=fsync", "status=none").CombinedOutput()
	if err != nil {
		t.Fatalf("dd: %v %s", err, out)
	}
	// The other mount reads it (its own cache is cold).
	other := mountT(t, c, 1)
	if out, err := exec.Command("cat", filepath.Join(other.Dir(), "jobs")).Output(); err != nil || len(out) != 6<<20 {
		t.Fatalf("cat: %d bytes, %v", len(out), err)
	}
	vals, err := params.Default.Get(false, "obdfilter.*.job_stats")
	if err != nil || len(vals) != 2 {
		t.Fatalf("job_stats: %v %v", vals, err)
	}
	sum := func(job, op string) uint64 {
		var total uint64
		re := regexp.MustCompile(`(?m)^  ` + op + `:\s+\{ samples: \d+, unit: bytes, min: \d+, max: \d+, sum: (\d+) \}`)
		for _, v := range vals {
			for _, entry := range strings.Split(v.Value, "- job_id:")[1:] {
				if strings.TrimSpace(strings.SplitN(entry, "\n", 2)[0]) != job {
					continue
				}
				if m := re.FindStringSubmatch(entry); m != nil {
					n, _ := strconv.ParseUint(m[1], 10, 64)
					total += n
				}
			}
		}
		return total
	}
	if got := sum("dd.0", "write_bytes"); got != 6<<20 {
		var b bytes.Buffer
		for _, v := range vals {
			b.WriteString(v.Name + "=\n" + v.Value + "\n")
		}
		t.Fatalf("dd.0 wrote %d bytes by job_stats, want %d:\n%s", got, 6<<20, b.String())
	}
	if got := sum("cat.0", "read_bytes"); got < 6<<20 {
		t.Fatalf("cat.0 read %d bytes by job_stats, want at least %d", got, 6<<20)
	}
}
