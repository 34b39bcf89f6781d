package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/spool-run/spool/httpauth"
	"github.com/spool-run/spool/internal/yamlstrict"
	"github.com/spool-run/spool/thread"
)

// Tenant-bound tokens (`spool api --tokens FILE`). A tokens file lists
// bearer tokens by the hex SHA-256 of each, never the token:
//
//	tokens:
//	  - name: acme-ci       # in logs and decisions, never the token
//	    sha256: 3b1f9c...   # hex SHA-256 of the bearer token
//	    tenant: acme        # bound: this tenant's runs only
//	  - name: ops           # no tenant: every tenant, and their administration
//	    sha256: 9c0a44...
//
// With a tokens file every request but /healthz, /v1/openapi.json and an
// approval link's needs "Authorization: Bearer TOKEN" whose SHA-256 is
// listed (or Config.Auth's credential, unbound), loopback included. A
// token bound to tenant T sees T's runs only: another tenant's run
// answers every route exactly as an id that does not exist, lists hold
// T's runs, its starts are T's (a body naming another tenant is 403
// tenant_forbidden, another tenant's parent is an unknown parent), its
// idempotency keys are T's, and it cannot administer tenants.

// Token is one entry of a tokens file.
type Token struct {
	// Name names the token in logs and as who decided or sent (never the
	// token itself).
	Name string
	// SHA256 is the SHA-256 of the bearer token.
	SHA256 [sha256.Size]byte
	// Tenant is the tenant the token is bound to; "" for an unbound token.
	Tenant string
}

// tokensFile is a tokens file as YAML has it.
type tokensFile struct {
	Tokens []struct {
		Name   string `yaml:"name"`
		SHA256 string `yaml:"sha256"`
		Tenant string `yaml:"tenant"`
	} `yaml:"tokens"`
}

// LoadTokens reads and checks the tokens file at path (ParseTokens).
func LoadTokens(path string) ([]Token, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	return ParseTokens(b, path)
}

// ParseTokens parses a tokens file (file names it in errors): at least
// one token; each with a name (unique), a sha256 of 64 hex digits
// (unique), and an optional tenant (a tenant name); no other keys.
func ParseTokens(b []byte, file string) ([]Token, error) {
	var f tokensFile
	if err := yamlstrict.Decode(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %s", file, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(f.Tokens) == 0 {
		return nil, fmt.Errorf("%s: no tokens: want tokens: [{name, sha256, tenant}]", file)
	}
	out := make([]Token, 0, len(f.Tokens))
	names, sums := map[string]bool{}, map[string]bool{}
	for i, e := range f.Tokens {
		where := fmt.Sprintf("%s: tokens[%d]", file, i)
		if strings.TrimSpace(e.Name) == "" {
			return nil, fmt.Errorf("%s: name is required", where)
		}
		sum, err := hex.DecodeString(strings.ToLower(e.SHA256))
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("%s (%s): sha256: want the 64 hex digits of the token's SHA-256 (sha256sum), not the token", where, e.Name)
		}
		if e.Tenant != "" {
			if err := thread.CheckTenant(e.Tenant); err != nil {
				return nil, fmt.Errorf("%s (%s): %w", where, e.Name, err)
			}
		}
		if names[e.Name] || sums[string(sum)] {
			return nil, fmt.Errorf("%s (%s): a token's name and sha256 appear once", where, e.Name)
		}
		names[e.Name], sums[string(sum)] = true, true
		t := Token{Name: e.Name, Tenant: e.Tenant}
		copy(t.SHA256[:], sum)
		out = append(out, t)
	}
	return out, nil
}

// caller is who a request comes from: a listed token's name and tenant
// ("" unbound), or an unbound credential of Config.Auth.
type caller struct {
	name, tenant string
}

type callerKey struct{}

// callerOf is the request's caller; an unbound, unnamed one where no
// tokens file is in force.
func callerOf(r *http.Request) caller {
	c, _ := r.Context().Value(callerKey{}).(caller)
	return c
}

// boundTenant is the tenant the request's token is bound to; "" for an
// unbound caller.
func boundTenant(r *http.Request) string { return callerOf(r).tenant }

// tokenGuard lets through a request with a listed token (its caller in
// the context) or Config.Auth's credential (unbound), and answers any
// other 401 with a Bearer challenge.
type tokenGuard struct {
	auth   httpauth.Auth
	tokens []Token
	deny   func(w http.ResponseWriter, r *http.Request, msg string)
}

func (g tokenGuard) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := g.allowed(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="spool api"`)
			g.deny(w, r, "spool api: authentication required")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

// allowed finds the request's caller: Config.Auth's credential, else the
// listed token whose SHA-256 is the bearer token's, compared in constant
// time with every entry (which one matched, or that none did, takes the
// same time).
func (g tokenGuard) allowed(r *http.Request) (caller, bool) {
	if g.auth.Enabled() && g.auth.Allowed(r) {
		u, _, _ := r.BasicAuth()
		return caller{name: u}, true
	}
	h := r.Header.Get("Authorization")
	if len(h) <= 7 || !strings.EqualFold(h[:7], "bearer ") {
		return caller{}, false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(h[7:])))
	found := -1
	for i := range g.tokens {
		if subtle.ConstantTimeCompare(sum[:], g.tokens[i].SHA256[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return caller{}, false
	}
	return caller{name: g.tokens[found].Name, tenant: g.tokens[found].Tenant}, true
}
