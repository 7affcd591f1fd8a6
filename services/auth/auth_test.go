package auth

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCheck(t *testing.T) {
	a, err := New(Config{Tokens: []Token{
		{Name: "ops", Token: "admin-0123456789abcdef", Role: RoleAdmin},
		{Name: "view", Token: "view-0123456789abcdef", Role: RoleReadOnly},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, header string
		mutating     bool
		want         codes.Code
		who          string
	}{
		{"no header", "", false, codes.Unauthenticated, ""},
		{"basic scheme", "Basic YWRtaW46cGFzcw==", false, codes.Unauthenticated, ""},
		{"bearer without token", "Bearer", false, codes.Unauthenticated, ""},
		{"unknown token", "Bearer nope-0123456789abcdef", false, codes.Unauthenticated, ""},
		{"admin reads", "Bearer admin-0123456789abcdef", false, codes.OK, "ops"},
		{"admin writes", "Bearer admin-0123456789abcdef", true, codes.OK, "ops"},
		{"scheme case and spaces", "  bearer   admin-0123456789abcdef ", true, codes.OK, "ops"},
		{"readonly reads", "Bearer view-0123456789abcdef", false, codes.OK, "view"},
		{"readonly writes", "Bearer view-0123456789abcdef", true, codes.PermissionDenied, ""},
		{"token prefix", "Bearer admin-0123456789abcde", false, codes.Unauthenticated, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := a.Check(tt.header, tt.mutating)
			if got := status.Code(err); got != tt.want {
				t.Fatalf("Check(%q, %v) = %v (%v), want %v", tt.header, tt.mutating, got, err, tt.want)
			}
			if tok.Name != tt.who {
				t.Fatalf("token %q, want %q", tok.Name, tt.who)
			}
		})
	}
	off, err := New(Config{Disabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := off.Check("", true); err != nil {
		t.Fatalf("disabled auth refused: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{Tokens: []Token{{Name: "short", Token: "tooshort", Role: RoleAdmin}}},
		{Tokens: []Token{{Name: "role", Token: "long-enough-token-123", Role: "root"}}},
		{Tokens: []Token{{Name: "a", Token: "long-enough-token-123", Role: RoleAdmin}, {Name: "b", Token: "long-enough-token-123", Role: RoleReadOnly}}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if (TLSConfig{CertFile: "x"}).Enabled() != true {
		t.Error("a cert alone should count as TLS configured (and then fail to load)")
	}
	if _, err := (TLSConfig{CertFile: "x"}).ServerConfig(); err == nil {
		t.Error("TLS without a key accepted")
	}
}
