package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

var lnetPort atomic.Int32

func init() { lnetPort.Store(27000) }

// lnetNode runs `nacre lnet serve` and waits for its ready line.
func lnetNode(t *testing.T, port int, sock string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(nacreBin, append([]string{"lnet", "serve", "--port", strconv.Itoa(port), "--socket", sock}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	deadline := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	defer deadline.Stop()
	for sc.Scan() {
		if sc.Text() == "ready" {
			go func() {
				for sc.Scan() {
				}
			}()
			return cmd
		}
	}
	t.Fatalf("nacre lnet serve %v did not become ready", args)
	return nil
}

// nacre runs the binary and returns its standard output, with standard
// error appended when it fails (so error messages can be checked).
func nacre(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stderr strings.Builder
	cmd := exec.Command(nacreBin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

func TestLNetServeLnetctlAndLst(t *testing.T) {
	port := int(lnetPort.Add(1))
	dir := t.TempDir()
	sock2, sock3 := filepath.Join(dir, "n2.sock"), filepath.Join(dir, "n3.sock")
	lnetNode(t, port, sock2, "--nid", "127.0.0.2@tcp")
	lnetNode(t, port, sock3, "--nid", "127.0.0.3@tcp")

	// net show -v: both NIs, counters, tunables, and the RDMA note.
	out, err := nacre(t, "lnetctl", "--socket", sock2, "net", "show", "-v")
	if err != nil {
		t.Fatalf("net show: %v\n%s", err, out)
	}
	var nets struct {
		Net []struct {
			NetType string `yaml:"net type"`
			NIs     []struct {
				NID        string         `yaml:"nid"`
				Status     string         `yaml:"status"`
				Statistics map[string]int `yaml:"statistics"`
				Tunables   map[string]int `yaml:"tunables"`
			} `yaml:"local NI(s)"`
		} `yaml:"net"`
		RDMA string `yaml:"rdma"`
	}
	if err := yaml.Unmarshal([]byte(out), &nets); err != nil {
		t.Fatalf("net show is not YAML: %v\n%s", err, out)
	}
	if len(nets.Net) != 2 || nets.Net[0].NetType != "lo" || nets.Net[1].NetType != "tcp" ||
		nets.Net[1].NIs[0].NID != "127.0.0.2@tcp" || nets.Net[1].NIs[0].Status != "up" || nets.Net[1].NIs[0].Tunables["peer_credits"] == 0 {
		t.Fatalf("net show -v:\n%s", out)
	}
	if !strings.Contains(nets.RDMA, "no RDMA devices") && !strings.Contains(out, "rdma devices") {
		t.Fatalf("net show -v says nothing about RDMA devices:\n%s", out)
	}

	// Selftest from a third process against node 2: write, read, ping.
	for _, op := range []string{"write", "read", "ping"} {
		out, err := nacre(t, "lst", "run", "--nid", "127.0.0.1@tcp", "--port", strconv.Itoa(port), "--peer", "127.0.0.2@tcp",
			"--op", op, "--size", "256K", "--concurrency", "4", "--duration", "1s", "--json")
		if err != nil {
			t.Fatalf("lst %s: %v\n%s", op, err, out)
		}
		var r struct {
			Ops    uint64  `json:"ops"`
			Errors uint64  `json:"errors"`
			Bytes  uint64  `json:"bytes"`
			MBps   float64 `json:"mb_per_s"`
			RPCps  float64 `json:"rpc_per_s"`
			P99    float64 `json:"p99_us"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("lst %s output is not JSON: %v\n%s", op, err, out)
		}
		if r.Ops == 0 || r.Errors != 0 || r.RPCps <= 0 || r.P99 <= 0 || (op != "ping" && r.Bytes != r.Ops*256<<10) {
			t.Fatalf("lst %s: %+v", op, r)
		}
	}
	out, err = nacre(t, "lst", "run", "--nid", "127.0.0.1@tcp", "--port", strconv.Itoa(port), "--peer", "127.0.0.2@tcp", "--op", "write", "--size", "2M")
	if err == nil || !strings.Contains(out, "size") {
		t.Fatalf("lst with an over-MTU size: %v\n%s", err, out)
	}
	// net show -v after the selftest: socklnd's own counters saw it.
	out, err = nacre(t, "lnetctl", "--socket", sock2, "net", "show", "-v")
	var lnd struct {
		Net []struct {
			NIs []struct {
				NID string            `yaml:"nid"`
				LND map[string]uint64 `yaml:"lnd statistics"`
			} `yaml:"local NI(s)"`
		} `yaml:"net"`
	}
	if err != nil || yaml.Unmarshal([]byte(out), &lnd) != nil || len(lnd.Net) != 2 {
		t.Fatalf("net show -v after the selftest: %v\n%s", err, out)
	}
	if sock := lnd.Net[1].NIs[0].LND; sock["rx_msgs"] == 0 || sock["tx_msgs"] == 0 || sock["tx_writes"] == 0 || sock["conns_made"] == 0 ||
		sock["rx_bytes"] < 3*256<<10 {
		t.Fatalf("socklnd counters after the selftest: %v\n%s", sock, out)
	}

	// ping and peer show: node 2 pings node 3 and then knows it.
	out, err = nacre(t, "lnetctl", "--socket", sock2, "ping", "127.0.0.3@tcp")
	if err != nil || !strings.Contains(out, "primary nid: 127.0.0.3@tcp") {
		t.Fatalf("ping: %v\n%s", err, out)
	}
	out, err = nacre(t, "lnetctl", "--socket", sock2, "peer", "show")
	if err != nil || !strings.Contains(out, "127.0.0.3@tcp") {
		t.Fatalf("peer show: %v\n%s", err, out)
	}
	out, err = nacre(t, "lnetctl", "--socket", sock2, "stats", "show")
	var st struct {
		Statistics map[string]uint64 `yaml:"statistics"`
	}
	if err != nil || yaml.Unmarshal([]byte(out), &st) != nil || st.Statistics["send_count"] == 0 || st.Statistics["recv_count"] == 0 {
		t.Fatalf("stats show: %v\n%s", err, out)
	}

	// Nets added and deleted at run time: node 3 pings node 2 over a net
	// both added; once node 2 deletes it, that fails, and the net is gone
	// from net show. Refusals say why, without the hint for a dead node.
	for _, n := range []struct{ sock, ip string }{{sock2, "127.0.0.12"}, {sock3, "127.0.0.13"}} {
		out, err := nacre(t, "lnetctl", "--socket", n.sock, "net", "add", "--net", "tcp5", "--ip", n.ip, "--peer-credits", "16")
		if err != nil || !strings.Contains(out, n.ip+"@tcp5") {
			t.Fatalf("net add: %v\n%s", err, out)
		}
	}
	out, err = nacre(t, "lnetctl", "--socket", sock2, "net", "show", "-v")
	if err != nil || yaml.Unmarshal([]byte(out), &nets) != nil || len(nets.Net) != 3 || nets.Net[2].NetType != "tcp5" ||
		nets.Net[2].NIs[0].NID != "127.0.0.12@tcp5" || nets.Net[2].NIs[0].Tunables["peer_credits"] != 16 {
		t.Fatalf("net show after net add: %v\n%s", err, out)
	}
	if out, err := nacre(t, "lnetctl", "--socket", sock3, "ping", "127.0.0.12@tcp5"); err != nil || !strings.Contains(out, "127.0.0.12@tcp5") {
		t.Fatalf("ping over the added net: %v\n%s", err, out)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "--net", "tcp5", "--ip", "127.0.0.12"}, "exists"},
		{[]string{"add", "--net", "nonet", "--ip", "127.0.0.14"}, "nonet"},
		{[]string{"add", "--net", "tcp6", "--if", "no-such-if0"}, "no-such-if0"},
		{[]string{"del", "--net", "lo"}, "0@lo"},
		{[]string{"del", "--net", "tcp7"}, "not configured"},
	} {
		out, err := nacre(t, append([]string{"lnetctl", "--socket", sock2, "net"}, bad.args...)...)
		if err == nil || !strings.Contains(out, bad.want) || strings.Contains(out, "is an LNet node serving") {
			t.Fatalf("net %v: %v\n%s", bad.args, err, out)
		}
	}
	if out, err := nacre(t, "lnetctl", "--socket", sock2, "net", "del", "--net", "tcp5"); err != nil || !strings.Contains(out, "127.0.0.12@tcp5") {
		t.Fatalf("net del: %v\n%s", err, out)
	}
	if out, _ := nacre(t, "lnetctl", "--socket", sock2, "net", "show"); strings.Contains(out, "tcp5") {
		t.Fatalf("net show after net del:\n%s", out)
	}
	if out, err := nacre(t, "lnetctl", "--socket", sock3, "--timeout", "3s", "ping", "127.0.0.12@tcp5"); err == nil {
		t.Fatalf("ping over the deleted net:\n%s", out)
	}

	// Routes: add, show, delete.
	if out, err := nacre(t, "lnetctl", "--socket", sock2, "route", "add", "--net", "tcp9", "--gateway", "127.0.0.3@tcp", "--hop", "1"); err != nil {
		t.Fatalf("route add: %v\n%s", err, out)
	}
	out, err = nacre(t, "lnetctl", "--socket", sock2, "route", "show")
	if err != nil || !strings.Contains(out, "net: tcp9") || !strings.Contains(out, "gateway: 127.0.0.3@tcp") {
		t.Fatalf("route show: %v\n%s", err, out)
	}
	if out, err := nacre(t, "lnetctl", "--socket", sock2, "route", "del", "--net", "tcp9"); err != nil {
		t.Fatalf("route del: %v\n%s", err, out)
	}
	out, _ = nacre(t, "lnetctl", "--socket", sock2, "route", "show")
	if strings.Contains(out, "tcp9") {
		t.Fatalf("route still there after del:\n%s", out)
	}
	if out, err := nacre(t, "lnetctl", "--socket", sock2, "route", "add", "--net", "nonet", "--gateway", "127.0.0.3@tcp"); err == nil {
		t.Fatalf("route add with a bad net succeeded:\n%s", out)
	}

	// Peers configured: node 3 as a peer of two NIDs (the second made
	// up, so nothing is sent: sends would go to both), shown as configured; one NID deleted, then the peer; bad ones
	// refused.
	if out, err := nacre(t, "lnetctl", "--socket", sock2, "peer", "add", "--prim_nid", "127.0.0.3@tcp", "--nid", "127.0.0.9@tcp"); err != nil {
		t.Fatalf("peer add: %v\n%s", err, out)
	}
	out, err = nacre(t, "lnetctl", "--socket", sock2, "peer", "show")
	type shownPeer struct {
		Primary    string `yaml:"primary nid"`
		MultiRail  bool   `yaml:"Multi-Rail"`
		Configured bool   `yaml:"configured"`
		NIs        []struct {
			NID string `yaml:"nid"`
		} `yaml:"peer ni"`
	}
	var peers struct {
		Peer []shownPeer `yaml:"peer"`
	}
	if err != nil || yaml.Unmarshal([]byte(out), &peers) != nil {
		t.Fatalf("peer show after peer add: %v\n%s", err, out)
	}
	i := slices.IndexFunc(peers.Peer, func(p shownPeer) bool { return p.Primary == "127.0.0.3@tcp" })
	// (Node 3's other NID, on tcp5, came in its discovery push.)
	hasNID := func(p shownPeer, nid string) bool {
		return slices.ContainsFunc(p.NIs, func(n struct {
			NID string `yaml:"nid"`
		}) bool {
			return n.NID == nid
		})
	}
	if i < 0 || !peers.Peer[i].Configured || !peers.Peer[i].MultiRail || peers.Peer[i].NIs[0].NID != "127.0.0.3@tcp" || !hasNID(peers.Peer[i], "127.0.0.9@tcp") {
		t.Fatalf("peer show after peer add:\n%s", out)
	}
	for _, bad := range [][]string{
		{"add", "--prim_nid", "127.0.0.2@tcp"},                                       // this node's
		{"add", "--prim_nid", "127.0.0.4@tcp", "--nid", "127.0.0.9@tcp"},             // another configured peer's
		{"add", "--prim_nid", "127.0.0.4@tcp", "--nid", "127.0.0.5@tcp", "--non_mr"}, // two NIDs, not multi-rail
		{"add", "--prim_nid", "nonid"},
		{"del", "--prim_nid", "127.0.0.9@tcp"},                           // not a primary NID
		{"del", "--prim_nid", "127.0.0.3@tcp", "--nid", "127.0.0.3@tcp"}, // the primary as a NID
	} {
		if out, err := nacre(t, append([]string{"lnetctl", "--socket", sock2, "peer"}, bad...)...); err == nil {
			t.Fatalf("peer %v accepted:\n%s", bad, out)
		}
	}
	if out, err := nacre(t, "lnetctl", "--socket", sock2, "peer", "del", "--prim_nid", "127.0.0.3@tcp", "--nid", "127.0.0.9@tcp"); err != nil {
		t.Fatalf("peer del --nid: %v\n%s", err, out)
	}
	out, _ = nacre(t, "lnetctl", "--socket", sock2, "peer", "show")
	if strings.Contains(out, "127.0.0.9@tcp") || !strings.Contains(out, "127.0.0.3@tcp") {
		t.Fatalf("peer show after deleting a NID:\n%s", out)
	}
	if out, err := nacre(t, "lnetctl", "--socket", sock2, "peer", "del", "--prim_nid", "127.0.0.3@tcp"); err != nil {
		t.Fatalf("peer del: %v\n%s", err, out)
	}
	if out, _ = nacre(t, "lnetctl", "--socket", sock2, "peer", "show"); strings.Contains(out, "127.0.0.3@tcp") {
		t.Fatalf("peer show after peer del:\n%s", out)
	}

	// Globals: shown, set one at a time (each printed back), refused when
	// out of range with nothing changed.
	globals := func(out string) map[string]float64 {
		t.Helper()
		var g struct {
			Global map[string]float64 `yaml:"global"`
		}
		if err := yaml.Unmarshal([]byte(out), &g); err != nil || len(g.Global) != 5 {
			t.Fatalf("globals are not YAML with 5 keys: %v\n%s", err, out)
		}
		return g.Global
	}
	out, err = nacre(t, "lnetctl", "--socket", sock2, "global", "show")
	if err != nil {
		t.Fatalf("global show: %v\n%s", err, out)
	}
	if g := globals(out); g["discovery"] != 1 || g["retry_count"] != 2 || g["health_sensitivity"] != 100 || g["transaction_timeout"] <= 0 {
		t.Fatalf("global show, defaults: %v", g)
	}
	for _, set := range [][2]string{{"discovery", "0"}, {"retry_count", "0"}, {"transaction_timeout", "30"}, {"health_sensitivity", "0"}, {"recovery_interval", "0.5"}} {
		if out, err := nacre(t, "lnetctl", "--socket", sock2, "set", set[0], set[1]); err != nil || fmt.Sprint(globals(out)[set[0]]) != set[1] {
			t.Fatalf("set %s %s: %v\n%s", set[0], set[1], err, out)
		}
	}
	for _, bad := range [][2]string{{"retry_count", "101"}, {"health_sensitivity", "1001"}, {"transaction_timeout", "0"}, {"recovery_interval", "-1"}, {"discovery", "yes"}, {"retry_count", "x"}} {
		if out, err := nacre(t, "lnetctl", "--socket", sock2, "set", bad[0], bad[1]); err == nil {
			t.Fatalf("set %s %s accepted:\n%s", bad[0], bad[1], out)
		}
	}
	out, _ = nacre(t, "lnetctl", "--socket", sock2, "global", "show")
	if g := globals(out); g["discovery"] != 0 || g["retry_count"] != 0 || g["transaction_timeout"] != 30 || g["health_sensitivity"] != 0 || g["recovery_interval"] != 0.5 {
		t.Fatalf("global show after the sets and the refusals: %v", g)
	}
	// Node 3 is left as it was.
	if out, _ := nacre(t, "lnetctl", "--socket", sock3, "global", "show"); globals(out)["discovery"] != 1 {
		t.Fatalf("node 3's globals changed:\n%s", out)
	}

	// Invoked as lnetctl through a symlink.
	link := filepath.Join(dir, "lnetctl")
	if err := os.Symlink(nacreBin, link); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(link, "--socket", sock3, "net", "show").CombinedOutput(); err != nil || !strings.Contains(string(out), "127.0.0.3@tcp") {
		t.Fatalf("lnetctl symlink: %v\n%s", err, out)
	}

	// No node behind the socket: a clear error, not a hang.
	out, err = nacre(t, "lnetctl", "--socket", filepath.Join(dir, "none.sock"), "--timeout", "2s", "net", "show")
	if err == nil || !strings.Contains(out, "none.sock") {
		t.Fatalf("lnetctl without a node: %v\n%s", err, out)
	}

	// export and import: node 3's configuration taken away (import --del)
	// and put back from the export, an import run twice, a bad file.
	ctl3 := func(args ...string) string {
		t.Helper()
		out, err := nacre(t, append([]string{"lnetctl", "--socket", sock3}, args...)...)
		if err != nil {
			t.Fatalf("lnetctl %v: %v\n%s", args, err, out)
		}
		return out
	}
	ctl3("net", "del", "--net", "tcp5") // (added above)
	ctl3("net", "add", "--net", "tcp6", "--ip", "127.0.0.23", "--peer-credits", "12")
	ctl3("route", "add", "--net", "tcp9", "--gateway", "127.0.0.2@tcp", "--hop", "2")
	ctl3("peer", "add", "--prim_nid", "127.0.0.30@tcp", "--nid", "127.0.0.31@tcp")
	ctl3("set", "retry_count", "1")
	export := ctl3("export")
	var cfg struct {
		Net []struct {
			NetType string `yaml:"net type"`
			NIs     []struct {
				NID      string         `yaml:"nid"`
				Tunables map[string]int `yaml:"tunables"`
			} `yaml:"local NI(s)"`
		} `yaml:"net"`
		Route []struct {
			Net     string `yaml:"net"`
			Gateway string `yaml:"gateway"`
			Hop     int    `yaml:"hop"`
		} `yaml:"route"`
		Peer []struct {
			Primary string `yaml:"primary nid"`
		} `yaml:"peer"`
		Global map[string]float64 `yaml:"global"`
	}
	if err := yaml.Unmarshal([]byte(export), &cfg); err != nil || len(cfg.Net) != 2 || cfg.Net[0].NIs[0].NID != "127.0.0.3@tcp" ||
		cfg.Net[1].NIs[0].NID != "127.0.0.23@tcp6" || cfg.Net[1].NIs[0].Tunables["peer_credits"] != 12 ||
		len(cfg.Route) != 1 || cfg.Route[0].Hop != 2 || len(cfg.Peer) != 1 || cfg.Peer[0].Primary != "127.0.0.30@tcp" || cfg.Global["retry_count"] != 1 {
		t.Fatalf("export: %v\n%s", err, export)
	}
	file := filepath.Join(dir, "lnet.yaml")
	if err := os.WriteFile(file, []byte(export), 0o600); err != nil {
		t.Fatal(err)
	}
	out = ctl3("import", "--del", file)
	for _, gone := range []string{"net 127.0.0.3@tcp", "net 127.0.0.23@tcp6", "route tcp9 via 127.0.0.2@tcp", "peer 127.0.0.30@tcp"} {
		if !strings.Contains(out, gone) {
			t.Fatalf("import --del did not delete %s:\n%s", gone, out)
		}
	}
	if out := ctl3("net", "show"); strings.Contains(out, "@tcp") {
		t.Fatalf("net show after import --del:\n%s", out)
	}
	if out := ctl3("route", "show") + ctl3("peer", "show"); strings.Contains(out, "tcp9") || strings.Contains(out, "127.0.0.30@tcp") {
		t.Fatalf("routes and peers after import --del:\n%s", out)
	}
	ctl3("set", "retry_count", "3")
	out = ctl3("import", file)
	if again := ctl3("export"); again != export {
		t.Fatalf("export after import differs:\n%s\nwas:\n%s\nimport said:\n%s", again, export, out)
	}
	if out := ctl3("import", file); !strings.Contains(out, "already there") || !strings.Contains(out, "127.0.0.23@tcp6") {
		t.Fatalf("import again:\n%s", out)
	}
	if out := ctl3("ping", "127.0.0.2@tcp"); !strings.Contains(out, "127.0.0.2@tcp") {
		t.Fatalf("ping from the imported NI:\n%s", out)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("net: [1, 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := nacre(t, "lnetctl", "--socket", sock3, "import", bad); err == nil || !strings.Contains(out, "not an lnetctl export") {
		t.Fatalf("import of a bad file: %v\n%s", err, out)
	}
}
