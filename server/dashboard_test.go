package server_test

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	adminv1 "github.com/nacrefs/nacre/proto/nacre/admin/v1"
)

// chromium runs headless Chromium on url with args (--dump-dom,
// --screenshot=FILE) and returns its standard output. The test fails when
// Chromium is not installed: CI installs it (.ci/run), and a dashboard
// nobody has seen render is not tested.
func chromium(t *testing.T, profile, url string, args ...string) []byte {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("the dashboard test needs headless Chromium, which is not installed (%v): apt-get install -y chromium (Debian's package; .ci/run installs it)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900", "--virtual-time-budget=5000",
		"--user-data-dir=" + profile, "--no-first-run", "--disable-extensions", "--hide-scrollbars"}
	cmd := exec.CommandContext(ctx, bin, append(append(base, args...), url)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "HOME="+profile)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.Bytes())
	}
	return out
}

var attrRE = regexp.MustCompile(`([a-z-]+)="([^"]*)"`)

// targetRows returns the attributes of the dashboard's target rows, by
// target name.
func targetRows(dom string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, row := range regexp.MustCompile(`<tr [^>]*class="target"[^>]*>`).FindAllString(dom, -1) {
		attrs := map[string]string{}
		for _, m := range attrRE.FindAllStringSubmatch(row, -1) {
			attrs[m[1]] = m[2]
		}
		out[attrs["data-target"]] = attrs
	}
	return out
}

// checkDashboard loads /dashboard in headless Chromium: the page, built by
// its script from the REST API, must show the cluster's targets with the
// API's space figures, and its screenshot must be a rendered page (the
// header, the space bars), not a blank one.
func checkDashboard(t *testing.T, o *overviewCluster, ov *adminv1.ClusterOverview) {
	profile := t.TempDir()
	url := o.https + "/dashboard"
	dom := string(chromium(t, profile, url, "--dump-dom"))
	if !strings.Contains(dom, `data-loaded="true"`) {
		t.Fatalf("the dashboard did not load the overview:\n%.3000s", dom)
	}
	rows := targetRows(dom)
	for _, tg := range ov.GetTargets() {
		r := rows[tg.GetName()]
		if r == nil {
			t.Fatalf("the dashboard has no row for %s: rows %v", tg.GetName(), rows)
		}
		if r["data-total-bytes"] != strconv.FormatUint(tg.GetUsage().GetTotalBytes(), 10) || r["data-state"] != "TARGET_STATE_UP" {
			t.Fatalf("%s on the dashboard: %v; the API says total %d, up", tg.GetName(), r, tg.GetUsage().GetTotalBytes())
		}
		// Free space moves a little as the servers write; the dashboard
		// read it within seconds of the API.
		avail, _ := strconv.ParseFloat(r["data-avail-bytes"], 64)
		if want := float64(tg.GetUsage().GetAvailBytes()); avail < want*0.99 || avail > want*1.01 {
			t.Fatalf("%s: avail %v on the dashboard, %v from the API", tg.GetName(), avail, want)
		}
	}
	if len(rows) != len(ov.GetTargets()) {
		t.Fatalf("dashboard rows %v, want %d targets", rows, len(ov.GetTargets()))
	}
	// Throughput is a rate between two reads: the page refreshed itself.
	if !regexp.MustCompile(`id="write-rate">[0-9.]+ [KMGTP]?i?B/s<`).MatchString(dom) {
		t.Fatalf("no write rate on the dashboard: it did not refresh itself:\n%.3000s", dom)
	}
	for _, want := range []string{">nacre<", ">nacre-MDT0000<", ">nacre-OST0001<", "COMPLETE", ov.GetServers()[0].GetAddress()} {
		if !strings.Contains(dom, want) {
			t.Fatalf("the dashboard does not show %q", want)
		}
	}

	// NACRE_TEST_SCREENSHOT=FILE keeps the screenshot, to look at.
	shot := os.Getenv("NACRE_TEST_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "dashboard.png")
	}
	chromium(t, profile, url, "--screenshot="+shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	st := pixelStats(img)
	t.Logf("screenshot %v: %d colours, %.1f%% off the background, header %d px, space bar tracks %d px", img.Bounds().Size(), st.colours,
		100*st.inked, st.header, st.track)
	// Three targets' bars are 220×16 px each.
	if img.Bounds().Dx() != 1280 || st.colours < 64 || st.inked < 0.05 || st.header < 1280*20 || st.track < 3*220*16*3/4 {
		t.Fatalf("the screenshot does not look rendered: %+v (want ≥64 colours, ≥5%% drawn, the header and the space bars)", st)
	}
}

type shotStats struct {
	colours int
	inked   float64 // share of pixels not the page background
	header  int     // pixels of the header's colour
	track   int     // pixels of the space bars (track and fill) and badges
}

func pixelStats(img image.Image) shotStats {
	near := func(r, g, b uint32, c [3]uint32) bool {
		d := func(a, b uint32) bool { return a+8 >= b && b+8 >= a }
		return d(r, c[0]) && d(g, c[1]) && d(b, c[2])
	}
	bg, header := [3]uint32{0xf4, 0xf6, 0xf9}, [3]uint32{0x17, 0x32, 0x4d}
	// A bar's track and its fill (ok, warn, bad: by how full).
	bars := [][3]uint32{{0xe6, 0xeb, 0xf0}, {0x2e, 0x9e, 0x5b}, {0xe0, 0xa1, 0x00}, {0xd2, 0x45, 0x3d}}
	isBar := func(r, g, b uint32) bool {
		for _, c := range bars {
			if near(r, g, b, c) {
				return true
			}
		}
		return false
	}
	colours := map[uint32]bool{}
	var st shotStats
	b := img.Bounds()
	inked := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			r, g, bl = r>>8, g>>8, bl>>8
			if len(colours) < 1<<16 {
				colours[r<<16|g<<8|bl] = true
			}
			switch {
			case near(r, g, bl, bg):
			case near(r, g, bl, header):
				st.header++
				inked++
			case isBar(r, g, bl):
				st.track++
				inked++
			default:
				inked++
			}
		}
	}
	st.colours = len(colours)
	st.inked = float64(inked) / float64(b.Dx()*b.Dy())
	return st
}
