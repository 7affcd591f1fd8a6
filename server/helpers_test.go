package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/nacrefs/nacre/internal/params"
	"github.com/nacrefs/nacre/services/auth"
)

const (
	adminToken    = "admin-token-0123456789"
	readonlyToken = "readonly-token-0123456789"
)

func testTokens() []auth.Token {
	return []auth.Token{
		{Name: "ops", Token: adminToken, Role: auth.RoleAdmin},
		{Name: "viewer", Token: readonlyToken, Role: auth.RoleReadOnly},
	}
}

// startMGS runs a MGS on ephemeral loopback ports over the given etcd.
func startMGS(t *testing.T, endpoints []string, mod ...func(*MGSConfig)) *MGS {
	t.Helper()
	cfg := DefaultMGSConfig()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.EtcdEndpoints = endpoints
	cfg.EtcdPrefix = "/test/" + t.Name() + "/"
	cfg.Auth.Tokens = testTokens()
	cfg.RequestTimeout = 2 * time.Second
	for _, m := range mod {
		m(&cfg)
	}
	m, err := StartMGS(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Close(ctx)
	})
	// The HSM coordinator campaigns in the background; its election key
	// lands in etcd then. Tests that compare etcd before and after a
	// refused request start once it is there.
	for deadline := time.Now().Add(10 * time.Second); !m.coord.Leader(); {
		if time.Now().After(deadline) {
			t.Fatal("the MGS's HSM coordinator was never elected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return m
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func withToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// etcdSnapshot is every key under the MGS's prefix, for "nothing changed" checks.
func etcdSnapshot(t *testing.T, m *MGS) map[string]string {
	t.Helper()
	resp, err := m.cli.Get(context.Background(), m.cfg.EtcdPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func sameSnapshot(t *testing.T, before, after map[string]string) {
	t.Helper()
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Fatalf("etcd changed: new key %s = %.100s", k, after[k])
		}
	}
	if len(before) != len(after) {
		t.Fatalf("etcd changed: %d keys before, %d after", len(before), len(after))
	}
	for k, v := range before {
		if after[k] != v {
			t.Fatalf("etcd key %s changed", k)
		}
	}
}

type restResp struct {
	code   int
	body   map[string]any
	raw    string
	header http.Header
}

func rest(t *testing.T, m *MGS, method, path, token, body string) restResp {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+m.HTTPAddr()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := restResp{code: resp.StatusCode, raw: string(raw), header: resp.Header}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

// pki is a throwaway CA with a server and two client certificates: one the CA
// signed, one self-signed.
type pki struct {
	dir                           string
	caFile, serverCert, serverKey string
	clientCert, rogueCert         tls.Certificate
	caPool                        *x509.CertPool
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nacre test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	p := pki{dir: dir, caPool: x509.NewCertPool()}
	p.caPool.AddCert(caCert)
	p.caFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)

	issue := func(name string, serial int64, server bool, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) ([]byte, *ecdsa.PrivateKey) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature,
		}
		if server {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		} else {
			tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		}
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	sDER, sKey := issue("127.0.0.1", 2, true, caCert, caKey)
	p.serverCert = writePEM(t, dir, "server.pem", "CERTIFICATE", sDER)
	skDER, _ := x509.MarshalECPrivateKey(sKey)
	p.serverKey = writePEM(t, dir, "server-key.pem", "EC PRIVATE KEY", skDER)
	cDER, cKey := issue("client", 3, false, caCert, caKey)
	p.clientCert = tls.Certificate{Certificate: [][]byte{cDER}, PrivateKey: cKey}
	rDER, rKey := issue("rogue", 4, false, nil, nil)
	p.rogueCert = tls.Certificate{Certificate: [][]byte{rDER}, PrivateKey: rKey}
	return p
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// paramValue reads one parameter from reg, failing the test unless it
// exists alone.
func paramValue(t *testing.T, reg *params.Registry, name string) string {
	t.Helper()
	v, err := reg.Get(false, name)
	if err != nil || len(v) != 1 {
		t.Fatalf("get %s: %v %v", name, v, err)
	}
	return v[0].Value
}
