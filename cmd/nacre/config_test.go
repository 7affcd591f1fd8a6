package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nacrefs/nacre/internal/mmp"
	"github.com/nacrefs/nacre/server"
)

// TestUpRestartFewerOSTs: `nacre up` started again on its data directory
// with a smaller --osts must still serve every OST formatted there:
// files are striped over them, and their clients would wait for ever.
func TestUpRestartFewerOSTs(t *testing.T) {
	data := t.TempDir()
	ports := [4]string{freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)}
	p := startUp(t, data, ports, "--osts", "3", "--no-auth")
	p.stop(t)

	p = startUp(t, data, ports, "--osts", "1", "--no-auth")
	for _, l := range []string{"nacre-OST0000", "nacre-OST0001", "nacre-OST0002"} {
		if !strings.Contains(p.out.String(), "ost    "+l) {
			t.Fatalf("restart with --osts 1: %s not served:\n%s", l, p.out)
		}
	}
	code, body := httpDo(t, "GET", "http://"+p.httpAddr+"/api/v1/filesystems/nacre/targets", "", "")
	if code != 200 || strings.Count(body, `"state":"TARGET_STATE_UP"`) != 4 {
		t.Fatalf("targets after a restart with --osts 1: %d %s (want MDT0 and 3 OSTs up)", code, body)
	}
	p.stop(t)

	// More than before formats the new ones, as on the first start.
	p = startUp(t, data, ports, "--osts", "4", "--no-auth")
	if !strings.Contains(p.out.String(), "ost    nacre-OST0003") {
		t.Fatalf("restart with --osts 4: OST0003 not formatted and served:\n%s", p.out)
	}
	p.stop(t)
}

// TestMkfsConfig: nacre mkfs takes its settings as every command does:
// a flag over a NACRE_* variable over the config file over the default.
// The config file may hold keys of the other commands that share it.
func TestMkfsConfig(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "nacre.yaml")
	yaml := "fsname: fromfile\nindex: 7\nost: true\nmgsnode: 10.0.0.1@tcp\n" +
		// Read by nacre up, server and mgs from the same file.
		"osts: 2\nrecovery-window: 5s\nauth:\n  disabled: true\n  tokens:\n    - name: a\n      token: a-token-0123456789abcdef\n      role: admin\n"
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	mkfs := func(env []string, args ...string) server.TargetIdentity {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "tgt")
		cmd := exec.Command(nacreBin, append([]string{"mkfs", "--config", cfgFile, dir}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nacre mkfs %v %v: %v\n%s", env, args, err, b)
		}
		b, err := os.ReadFile(filepath.Join(dir, server.TargetFile))
		if err != nil {
			t.Fatal(err)
		}
		var id server.TargetIdentity
		if err := json.Unmarshal(b, &id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	if id := mkfs(nil); id.Label != "fromfile-OST0007" || len(id.MGSNodes) != 1 || !strings.HasPrefix(id.MGSNodes[0], "10.0.0.1:") {
		t.Fatalf("from the config file: %+v (want fromfile-OST0007, mgs 10.0.0.1)", id)
	}
	env := []string{"NACRE_INDEX=8", "NACRE_FSNAME=fromenv", "NACRE_MGSNODE=10.0.0.2@tcp,10.0.0.3@tcp"}
	if id := mkfs(env); id.Label != "fromenv-OST0008" || len(id.MGSNodes) != 2 || !strings.HasPrefix(id.MGSNodes[1], "10.0.0.3:") {
		t.Fatalf("from NACRE_*: %+v (want fromenv-OST0008, mgs 10.0.0.2 and 10.0.0.3)", id)
	}
	if id := mkfs(env, "--index", "9", "--fsname", "fromflag"); id.Label != "fromflag-OST0009" {
		t.Fatalf("from flags: %+v (want fromflag-OST0009)", id)
	}
	if id := mkfs(nil); id.MMP || id.FailNodes != nil {
		t.Fatalf("a target without failover nodes: %+v (want no MMP)", id)
	}
}

// TestMkfsFailover: service and failover nodes are recorded and turn
// multiple-mount protection on (mkfs.lustre's default), unless --mmp=false;
// --mmp turns it on alone; a node that is not a NID is refused.
func TestMkfsFailover(t *testing.T) {
	mkfs := func(env []string, args ...string) (server.TargetIdentity, string, error) {
		t.Helper()
		dir := filepath.Join(t.TempDir(), "tgt")
		cmd := exec.Command(nacreBin, append([]string{"mkfs", "--ost", "--mgsnode", "10.0.0.1@tcp", dir}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return server.TargetIdentity{}, string(out), err
		}
		id, err := server.ReadTarget(dir)
		if err != nil {
			t.Fatal(err)
		}
		_, mmpErr := os.Stat(filepath.Join(dir, mmp.FileName))
		if id.MMP != (mmpErr == nil) {
			t.Fatalf("MMP %v in the identity, MMP block: %v", id.MMP, mmpErr)
		}
		return id, string(out), nil
	}
	for _, tc := range []struct {
		env, args []string
		nodes     []string
		mmp       bool
		interval  time.Duration
	}{
		{nil, []string{"--failnode", "10.0.0.5@tcp,10.0.0.6@tcp"}, []string{"10.0.0.5@tcp", "10.0.0.6@tcp"}, true, 5 * time.Second},
		{nil, []string{"--servicenode", "10.0.0.4@tcp", "--servicenode", "10.0.0.5@tcp", "--mmp-interval", "2s"}, []string{"10.0.0.4@tcp", "10.0.0.5@tcp"}, true, 2 * time.Second},
		{nil, []string{"--failnode", "10.0.0.5@tcp", "--mmp=false"}, []string{"10.0.0.5@tcp"}, false, 0},
		{nil, []string{"--mmp"}, nil, true, 5 * time.Second},
		{[]string{"NACRE_FAILNODE=10.0.0.7@tcp"}, nil, []string{"10.0.0.7@tcp"}, true, 5 * time.Second},
	} {
		id, out, err := mkfs(tc.env, tc.args...)
		if err != nil {
			t.Fatalf("mkfs %v %v: %v\n%s", tc.env, tc.args, err, out)
		}
		if !slices.Equal(id.FailNodes, tc.nodes) || id.MMP != tc.mmp || id.MMPInterval != tc.interval {
			t.Errorf("mkfs %v %v: nodes %v, MMP %v every %v; want %v, %v every %v", tc.env, tc.args, id.FailNodes, id.MMP, id.MMPInterval, tc.nodes, tc.mmp, tc.interval)
		}
		if tc.mmp != strings.Contains(out, "multiple-mount protection on") {
			t.Errorf("mkfs %v %v said:\n%s", tc.env, tc.args, out)
		}
	}
	if _, out, err := mkfs(nil, "--failnode", "oss2"); err == nil || !strings.Contains(out, "oss2") {
		t.Fatalf("mkfs with a failover node that is not a NID: %v\n%s", err, out)
	}
}

// TestConfigUnknownKeyRefused: a key of the config file that no command
// reads (a typo) is refused, naming it and the key meant, instead of
// being ignored.
func TestConfigUnknownKeyRefused(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "nacre.yaml")
	for _, tc := range []struct{ yaml, want string }{
		{"recovery_window: 5s\n", `unknown key "recovery_window" (did you mean "recovery-window"?)`},
		{"no-auth: true\n", `unknown key "no-auth" (--no-auth is "auth.disabled" in a config file)`},
		{"tls:\n  certt: x.pem\n", `unknown key "tls.certt" (did you mean "tls.cert"?)`},
	} {
		if err := os.WriteFile(cfgFile, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(nacreBin, "server", "--config", cfgFile, "--nid", "127.0.0.1@tcp", filepath.Join(t.TempDir(), "mdt0"))
		b, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(b), tc.want) {
			t.Fatalf("nacre server with %q: %v\n%s\nwant %s", tc.yaml, err, b, tc.want)
		}
	}
}

// TestConfigToolFlagRefused: a flag of a tool (bench's --stripe-count,
// lfs's, lctl's, the copytool's), which no command reads from the config
// file, is refused there as an unknown key, naming the command it belongs
// to; the keys of the commands that read the file are taken.
func TestConfigToolFlagRefused(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "nacre.yaml")
	for _, tc := range []struct{ yaml, want string }{
		{"stripe-count: 4\n", `unknown key "stripe-count" (--stripe-count is a flag of nacre `},
		{"workload: seqwrite\n", `unknown key "workload" (--workload is a flag of nacre bench only, not a setting)`},
		{"coordinator: 127.0.0.1@tcp\n", `unknown key "coordinator" (--coordinator is a flag of nacre `},
		{"human-readable: true\n", `unknown key "human-readable" (--human-readable is a flag of nacre lfs df only, not a setting)`},
		{"ready-fd: 3\n", `unknown key "ready-fd" (--ready-fd is a flag of nacre mount only, not a setting)`},
		{"port: 9888\nnid: 127.0.0.1@tcp\nlog-level: debug\noptions: noflock\nrecovery-window: 5s\nfsname: x\nosts: 2\n", ""},
	} {
		if err := os.WriteFile(cfgFile, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		err := checkConfigKeys(newRoot(), cfgFile)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.yaml, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want %s", tc.yaml, err, tc.want)
		}
	}
}

// TestTunefs: tunefs makes a target a failover target (service nodes,
// MMP on with them), shows the MMP block, drops them again with
// --erase-params, and refuses a target another node's heartbeat holds.
func TestTunefs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ost0")
	run := func(args ...string) (string, error) {
		out, err := exec.Command(nacreBin, append([]string{"tunefs"}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := exec.Command(nacreBin, "mkfs", "--ost", "--mgsnode", "10.0.0.1@tcp", dir).CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v\n%s", err, out)
	}
	if out, err := run("--servicenode", "10.0.0.5@tcp0,10.0.0.6@tcp", "--mmp-interval", "250ms", dir); err != nil || !strings.Contains(out, "MMP block: clean") {
		t.Fatalf("tunefs --servicenode: %v\n%s", err, out)
	}
	id, err := server.ReadTarget(dir)
	if err != nil || !id.MMP || id.MMPInterval != 250*time.Millisecond || !slices.Equal(id.FailNodes, []string{"10.0.0.5@tcp", "10.0.0.6@tcp"}) {
		t.Fatalf("identity after tunefs: %+v %v", id, err)
	}

	other, err := mmp.Start(t.Context(), mmp.Config{Dir: dir, Interval: 250 * time.Millisecond, Node: "oss9"})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run("--print", dir); err != nil || !strings.Contains(out, "written by node oss9") {
		t.Fatalf("tunefs --print of a served target: %v\n%s", err, out)
	}
	if out, err := run("--erase-params", dir); err == nil || !strings.Contains(out, `node "oss9"`) {
		t.Fatalf("tunefs of a target another node serves: %v\n%s", err, out)
	}
	if err := other.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out, err := run("--erase-params", "--mmp=false", dir); err != nil || !strings.Contains(out, "no failover") {
		t.Fatalf("tunefs --erase-params: %v\n%s", err, out)
	}
	if id, err := server.ReadTarget(dir); err != nil || id.MMP || id.FailNodes != nil {
		t.Fatalf("identity after --erase-params --mmp=false: %+v %v", id, err)
	}
	if _, err := os.Stat(filepath.Join(dir, mmp.FileName)); !os.IsNotExist(err) {
		t.Fatalf("MMP block left: %v", err)
	}
}
