package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nacrefs/nacre/internal/errs"
	"github.com/nacrefs/nacre/internal/etcdserver"
	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/lnet"
	"github.com/nacrefs/nacre/mgs"
	"github.com/nacrefs/nacre/services/auth"
)

// UpConfig configures the embedded single-node cluster.
type UpConfig struct {
	// DataDir holds etcd's data and the generated admin token.
	DataDir string
	// FSName is the filesystem created on first start.
	FSName string
	// EtcdClientURL and EtcdPeerURL of the embedded etcd member.
	EtcdClientURL string
	EtcdPeerURL   string
	// MGS is the management server's config; its EtcdEndpoints are ignored.
	MGS MGSConfig
	// OSTs is how many OSTs to serve at least (DataDir/ost0 to ostOSTs-1,
	// formatted when they are not yet), with MDT0 (DataDir/mdt0) and every
	// OST formatted in DataDir before beyond them; 0 runs the control
	// plane only.
	OSTs int
	// LNet configures the data plane's LNet when OSTs > 0.
	LNet lnet.Config
	// StatusAddr is the servers' status port (their metrics and live
	// state, which the gateway's /metrics and the Admin API read); the
	// default picks a free loopback port.
	StatusAddr string
	// RestoreReplayBarrier is ServerConfig's, for MDT0 and the OSTs.
	RestoreReplayBarrier bool
}

// DefaultUpConfig is `nacre up` without flags.
func DefaultUpConfig() UpConfig {
	return UpConfig{
		DataDir:       "./nacre-data",
		FSName:        "nacre",
		EtcdClientURL: "http://127.0.0.1:2379",
		EtcdPeerURL:   "http://127.0.0.1:2380",
		MGS:           DefaultMGSConfig(),
		OSTs:          4,
		LNet:          defaultUpLNet(),
		StatusAddr:    "127.0.0.1:0",
	}
}

// defaultUpLNet is the embedded cluster's LNet: 127.0.0.1@tcp on the
// socklnd port 988.
func defaultUpLNet() lnet.Config {
	cfg := lnet.DefaultConfig()
	nets, err := lnet.ParseNetworks("tcp(127.0.0.1)")
	if err != nil {
		panic(err) // a constant
	}
	cfg.Networks = nets
	return cfg
}

// Node is a running embedded cluster.
type Node struct {
	MGS *MGS
	// Storage serves MDT0 and the OSTs, when there are any.
	Storage *Storage
	// TokenFile holds the generated admin token, when one was generated.
	TokenFile string
	etcd      *etcdserver.Server
	// stopParams stops serving the process's parameters, if they are.
	stopParams func()
}

// TokenFileName is where Up keeps the admin token it generates.
const TokenFileName = "admin.token"

// Up starts an embedded etcd member, the MGS on top of it, and makes sure the
// default filesystem exists. Restarting on the same DataDir keeps every
// configuration change. When auth is on and no token is configured, Up
// creates an admin token in DataDir/admin.token (mode 0600) on first start
// and reuses it afterwards.
func Up(ctx context.Context, cfg UpConfig) (_ *Node, err error) {
	if cfg.DataDir == "" {
		return nil, errors.New("up: no data directory")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("up: data directory: %w", err)
	}
	var ostIdx []int
	if cfg.OSTs > 0 {
		var err error
		if ostIdx, err = upOSTs(cfg); err != nil {
			return nil, err
		}
		if err := checkUpTargets(cfg, ostIdx); err != nil {
			return nil, err
		}
	} else if _, err := os.Stat(filepath.Join(cfg.DataDir, "mdt0", TargetFile)); err == nil {
		cfg.logger().Warn("no OSTs asked for: the targets formatted in the data directory are not served, and their files wait until they are", "data", cfg.DataDir)
	}
	n := &Node{}
	defer func() {
		if err != nil {
			n.Close(context.Background())
		}
	}()
	if !cfg.MGS.Auth.Disabled && len(cfg.MGS.Auth.Tokens) == 0 {
		tok, file, err := loadOrCreateToken(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		n.TokenFile = file
		cfg.MGS.Auth.Tokens = []auth.Token{{Name: "admin", Token: tok, Role: auth.RoleAdmin}}
	}

	ecfg := etcdserver.DefaultConfig(filepath.Join(cfg.DataDir, "etcd"))
	ecfg.ClientURL, ecfg.PeerURL = cfg.EtcdClientURL, cfg.EtcdPeerURL
	if n.etcd, err = etcdserver.Start(ctx, ecfg); err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	cfg.MGS.EtcdEndpoints = []string{cfg.EtcdClientURL}
	if n.MGS, err = StartMGS(ctx, cfg.MGS); err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	if _, err := n.MGS.Store().CreateFilesystem(ctx, cfg.FSName); err != nil && !errs.Is(err, errs.Exist) {
		return nil, fmt.Errorf("up: create filesystem %s: %w", cfg.FSName, err)
	}
	n.MGS.RegisterHSMParams(cfg.FSName)
	// The process's parameters for lctl: the MGS's device, and the
	// servers' and a mount's entries as they start.
	stop, perr := params.Serve(context.Background(), params.Default)
	if perr != nil {
		cfg.logger().Warn("parameters not served to lctl", "err", perr)
	}
	n.stopParams = stop
	if cfg.OSTs > 0 {
		var dirs []string
		for _, i := range ostIdx {
			dir := filepath.Join(cfg.DataDir, fmt.Sprintf("ost%d", i))
			if _, err := os.Stat(filepath.Join(dir, TargetFile)); errors.Is(err, os.ErrNotExist) {
				id := TargetIdentity{FSName: cfg.FSName, Index: uint32(i), MGSNodes: []string{n.MGS.GRPCAddr()}}
				if _, err := FormatOST(ctx, dir, id); err != nil {
					return nil, fmt.Errorf("up: %w", err)
				}
			}
			dirs = append(dirs, dir)
		}
		dir := filepath.Join(cfg.DataDir, "mdt0")
		if _, err := os.Stat(filepath.Join(dir, TargetFile)); errors.Is(err, os.ErrNotExist) {
			id := TargetIdentity{FSName: cfg.FSName, MGSNodes: []string{n.MGS.GRPCAddr()}}
			if _, err := FormatMDT(ctx, dir, id); err != nil {
				return nil, fmt.Errorf("up: %w", err)
			}
		}
		dirs = append(dirs, dir)
		// The servers' metrics and state are on their own status port, as
		// those of a separate `nacre server`: the gateway's /metrics and the
		// Admin API reach them the same way.
		if n.Storage, err = StartServer(ctx, ServerConfig{Dirs: dirs, MGSNodes: []string{n.MGS.GRPCAddr()}, LNet: cfg.LNet, Logger: cfg.MGS.Logger, StatusAddr: cfg.StatusAddr,
			RestoreReplayBarrier: cfg.RestoreReplayBarrier}); err != nil {
			return nil, fmt.Errorf("up: %w", err)
		}
	}
	return n, nil
}

// logger is where Up logs: the MGS's logger, or slog's default.
func (cfg UpConfig) logger() *slog.Logger { return cmp.Or(cfg.MGS.Logger, slog.Default()) }

// upOSTs is the indices of the OSTs Up serves: 0 to cfg.OSTs-1 (those
// not formatted yet are formatted), and every OST formatted in DataDir
// before (DataDir/ostN holding its identity) beyond them. A restart with
// a smaller OSTs than the first start must still serve them all: files
// are striped over them, and their clients would wait for ever.
func upOSTs(cfg UpConfig) ([]int, error) {
	var idx []int
	for i := range cfg.OSTs {
		idx = append(idx, i)
	}
	ents, err := os.ReadDir(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("up: data directory: %w", err)
	}
	var extra []int
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), "ost")
		i, err := strconv.Atoi(n)
		if !ok || err != nil || i < cfg.OSTs || i > mgs.MaxIndex || n != strconv.Itoa(i) || !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(cfg.DataDir, e.Name(), TargetFile)); err == nil {
			extra = append(extra, i)
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		cfg.logger().Info("serving every OST formatted in the data directory, beyond --osts", "osts", cfg.OSTs, "extra", extra, "data", cfg.DataDir)
		idx = append(idx, extra...)
	}
	return idx, nil
}

// checkUpTargets refuses a DataDir whose targets were formatted for
// another file system than cfg.FSName (a restart with another --fsname):
// serving them would leave cfg.FSName, the one announced and mounted,
// without an MDT or OSTs. Nothing is created before this check.
func checkUpTargets(cfg UpConfig, osts []int) error {
	dirs := []string{filepath.Join(cfg.DataDir, "mdt0")}
	for _, i := range osts {
		dirs = append(dirs, filepath.Join(cfg.DataDir, fmt.Sprintf("ost%d", i)))
	}
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, TargetFile)); errors.Is(err, os.ErrNotExist) {
			continue // formatted below
		}
		id, err := ReadTarget(dir)
		if err != nil {
			return fmt.Errorf("up: %w", err)
		}
		if id.FSName != cfg.FSName {
			return fmt.Errorf("up: %s is %s, a target of file system %q, not %q: start with --fsname %s, or give another --data", dir, id.Label, id.FSName, cfg.FSName, id.FSName)
		}
	}
	return nil
}

// EtcdErr reports a fatal error of the embedded etcd member.
func (n *Node) EtcdErr() <-chan error { return n.etcd.Err() }

// Close stops the servers, the MGS, then etcd.
func (n *Node) Close(ctx context.Context) error {
	var err error
	if n.Storage != nil {
		err = n.Storage.Close(ctx)
	}
	if n.MGS != nil {
		err = errors.Join(err, n.MGS.Close(ctx))
	}
	if n.etcd != nil {
		n.etcd.Close()
	}
	if n.stopParams != nil {
		n.stopParams()
	}
	return err
}

func loadOrCreateToken(dir string) (token, file string, err error) {
	file = filepath.Join(dir, TokenFileName)
	b, err := os.ReadFile(file)
	if err == nil {
		token = strings.TrimSpace(string(b))
		if len(token) < 16 {
			return "", "", fmt.Errorf("up: %s holds a token shorter than 16 characters", file)
		}
		return token, file, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("up: read admin token: %w", err)
	}
	raw := make([]byte, 24)
	rand.Read(raw)
	token = hex.EncodeToString(raw)
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("up: write admin token: %w", err)
	}
	return token, file, nil
}
