// Package auth decides who may use the control plane: bearer tokens with a
// role for the Admin API (gRPC metadata or the REST Authorization header),
// and TLS or mutual TLS for every gRPC service. It holds the token table and
// nothing else; the gRPC server and the gateway both ask it.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Role is what a token may do.
type Role string

// Roles.
const (
	RoleAdmin    Role = "admin"    // read and change
	RoleReadOnly Role = "readonly" // read only
)

// Token is one configured bearer token.
type Token struct {
	Name  string `mapstructure:"name" yaml:"name"`
	Token string `mapstructure:"token" yaml:"token"`
	Role  Role   `mapstructure:"role" yaml:"role"`
}

// Config configures authentication.
type Config struct {
	// Disabled turns every check off. It must be said explicitly: an empty
	// token list with Disabled false refuses everyone.
	Disabled bool    `mapstructure:"disabled"`
	Tokens   []Token `mapstructure:"tokens"`
}

// Validate checks the token table.
func (c Config) Validate() error {
	seen := map[string]bool{}
	for i, t := range c.Tokens {
		if len(t.Token) < 16 {
			return fmt.Errorf("auth: token %d (%s) is shorter than 16 characters", i, t.Name)
		}
		if t.Role != RoleAdmin && t.Role != RoleReadOnly {
			return fmt.Errorf("auth: token %d (%s) has role %q; want admin or readonly", i, t.Name, t.Role)
		}
		if seen[t.Token] {
			return fmt.Errorf("auth: token %d (%s) is listed twice", i, t.Name)
		}
		seen[t.Token] = true
	}
	return nil
}

// Authorizer checks credentials. Safe for concurrent use; immutable.
type Authorizer struct {
	disabled bool
	tokens   map[[sha256.Size]byte]Token
}

// New builds an Authorizer from a validated config.
func New(cfg Config) (*Authorizer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Authorizer{disabled: cfg.Disabled, tokens: make(map[[sha256.Size]byte]Token, len(cfg.Tokens))}
	for _, t := range cfg.Tokens {
		a.tokens[sha256.Sum256([]byte(t.Token))] = t
	}
	return a, nil
}

// Disabled reports whether checks are off.
func (a *Authorizer) Disabled() bool { return a.disabled }

// Check authorizes a request carrying the given Authorization header value.
// It returns a gRPC status error: Unauthenticated for a missing or unknown
// token, PermissionDenied for a read-only token asking to change something.
func (a *Authorizer) Check(header string, mutating bool) (Token, error) {
	if a.disabled {
		return Token{Name: "anonymous", Role: RoleAdmin}, nil
	}
	scheme, raw, ok := strings.Cut(strings.TrimSpace(header), " ")
	if header == "" {
		return Token{}, status.Error(codes.Unauthenticated, "authentication required: send 'Authorization: Bearer <token>'")
	}
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return Token{}, status.Error(codes.Unauthenticated, "authorization header must be 'Bearer <token>'")
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(raw)))
	var found Token
	hit := 0
	// Compare against every entry so the time taken says nothing about which
	// token came close.
	for k, t := range a.tokens {
		if subtle.ConstantTimeCompare(k[:], sum[:]) == 1 {
			found, hit = t, 1
		}
	}
	if hit == 0 {
		return Token{}, status.Error(codes.Unauthenticated, "unknown token")
	}
	if mutating && found.Role != RoleAdmin {
		return Token{}, status.Errorf(codes.PermissionDenied, "token %q has role %s; changes need role admin", found.Name, found.Role)
	}
	return found, nil
}

// MethodPolicy says whether a full gRPC method name needs a token and
// whether it changes state.
type MethodPolicy func(fullMethod string) (guarded, mutating bool)

// UnaryInterceptor enforces tokens on guarded methods. A client that
// presented a certificate verified by the server's client CA (mutual TLS) is
// trusted as admin without a token.
func (a *Authorizer) UnaryInterceptor(policy MethodPolicy) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := a.checkRPC(ctx, info.FullMethod, policy); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor is UnaryInterceptor for streams.
func (a *Authorizer) StreamInterceptor(policy MethodPolicy) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := a.checkRPC(ss.Context(), info.FullMethod, policy); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

func (a *Authorizer) checkRPC(ctx context.Context, method string, policy MethodPolicy) error {
	guarded, mutating := policy(method)
	if !guarded || a.disabled || verifiedPeer(ctx) {
		return nil
	}
	var header string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			header = v[0]
		}
	}
	_, err := a.Check(header, mutating)
	return err
}

func verifiedPeer(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	return ok && len(ti.State.VerifiedChains) > 0
}

// TLSConfig names the files of a TLS setup.
type TLSConfig struct {
	CertFile     string `mapstructure:"cert"`
	KeyFile      string `mapstructure:"key"`
	ClientCAFile string `mapstructure:"client-ca"` // set: clients must present a certificate it signed
}

// Enabled reports whether TLS is configured.
func (c TLSConfig) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" }

// ServerConfig loads the server side of TLS (or mutual TLS).
func (c TLSConfig) ServerConfig() (*tls.Config, error) {
	if c.CertFile == "" || c.KeyFile == "" {
		return nil, fmt.Errorf("auth: tls needs both cert and key (have cert=%q key=%q)", c.CertFile, c.KeyFile)
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("auth: load tls key pair: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.ClientCAFile != "" {
		pem, err := os.ReadFile(c.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("auth: read client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("auth: client CA %s holds no PEM certificate", c.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
