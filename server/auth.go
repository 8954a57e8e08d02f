package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/store"
)

// roles is a set of api roles; the zero set marks an open endpoint.
type roles uint8

const (
	roleAdmin roles = 1 << iota
	roleClient
	roleWorker
	roleMonitor

	open       roles = 0
	adminOnly        = roleAdmin
	clientSide       = roleAdmin | roleClient
	workerSide       = roleAdmin | roleWorker
	anyRole          = roleAdmin | roleClient | roleWorker
	// lookers may read what the dashboard and the metrics show.
	lookers = roleAdmin | roleClient | roleMonitor
)

// roleOf returns the set holding the named role alone, 0 for an unknown
// name.
func roleOf(name string) roles {
	switch name {
	case api.RoleAdmin:
		return roleAdmin
	case api.RoleClient:
		return roleClient
	case api.RoleWorker:
		return roleWorker
	case api.RoleMonitor:
		return roleMonitor
	}
	return 0
}

// names lists the roles of the set, in api.Roles order.
func (rs roles) names() []string {
	var out []string
	for _, n := range api.Roles {
		if rs&roleOf(n) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// principal is who sent a request: the cluster key's holder (admin, no
// token ID) or a token's.
type principal struct {
	role    string
	tokenID string
	name    string
	group   string
}

type principalKey struct{}

// caller returns the principal of an authenticated request; the zero
// principal for an open endpoint.
func caller(r *http.Request) principal {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return p
}

// maxCredential bounds the Authorization header's credential; longer is
// not one braid made.
const maxCredential = 256

// authenticate returns the principal of r's credential: the cluster key's
// token or a valid stored token. Failures are errUnauthorized with a
// message that says what to do.
func (s *Server) authenticate(r *http.Request) (principal, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return principal{}, kindf(errUnauthorized, "no credential: send Authorization: Bearer TOKEN "+
			"(braid: --token or BRAID_TOKEN, or the cluster key with BRAID_KEY or --key-file)")
	}
	tok, ok := strings.CutPrefix(h, "Bearer ")
	tok = strings.TrimSpace(tok)
	if !ok || tok == "" || len(tok) > maxCredential {
		return principal{}, kindf(errUnauthorized, "the Authorization header is not \"Bearer TOKEN\"")
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(s.token)) == 1 {
		return principal{role: api.RoleAdmin, name: "cluster key"}, nil
	}
	if !strings.HasPrefix(tok, api.TokenPrefix) {
		return principal{}, kindf(errUnauthorized, "wrong credential: not a token of this server, and not derived from its cluster key "+
			"(check BRAID_KEY or --key-file, or --token)")
	}
	t, ok := s.access.lookup(tokenHash(tok))
	switch {
	case !ok:
		return principal{}, kindf(errUnauthorized, "unknown token: this server did not issue it (braid token list shows the ones it did)")
	case !t.Revoked.IsZero():
		return principal{}, kindf(errUnauthorized, "token %s (%s) was revoked at %s; ask an admin for a new one (braid token create)",
			t.ID, t.Name, t.Revoked.Format(time.RFC3339))
	}
	s.touch(r.Context(), t.ID)
	return principal{role: t.Role, tokenID: t.ID, name: t.Name, group: t.Group}, nil
}

// authorize checks that p may call an endpoint open to rs.
func authorize(p principal, rs roles, r *http.Request, pattern string) error {
	if rs&roleOf(p.role) != 0 {
		return nil
	}
	return kindf(errForbidden, "a %s credential may not %s %s; it needs a token of role %s",
		p.role, r.Method, pattern, strings.Join(rs.names(), " or "))
}

// tokenHash is how the server keeps a token: the hex SHA-256 of it.
func tokenHash(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

// touchEvery is how often a token's last use is written to the store.
const touchEvery = time.Minute

// touch records a use of token id, at most once per touchEvery. A
// failure costs only the record.
func (s *Server) touch(ctx context.Context, id string) {
	now := time.Now()
	if !s.access.due(id, now) {
		return
	}
	if err := s.db.TouchToken(context.WithoutCancel(ctx), id, now); err != nil {
		s.log.Debug("token use not recorded", "token", id, "err", err)
	}
}

// accessTokens is the server's copy of the stored tokens, by hash, so
// that authenticating a request reads no database. Every change goes
// through the store first, then here.
type accessTokens struct {
	mu      sync.Mutex
	byHash  map[string]store.Token
	touched map[string]time.Time // by ID
}

func (a *accessTokens) load(ts []store.Token) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.byHash = make(map[string]store.Token, len(ts))
	a.touched = map[string]time.Time{}
	for _, t := range ts {
		a.byHash[t.Hash] = t
	}
}

func (a *accessTokens) lookup(hash string) (store.Token, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.byHash[hash]
	return t, ok
}

func (a *accessTokens) put(t store.Token) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.byHash[t.Hash] = t
}

// due reports whether token id's use at now should be written, and if so
// notes it.
func (a *accessTokens) due(id string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.touched[id]) < touchEvery {
		return false
	}
	a.touched[id] = now
	return true
}

// newSecret returns a new token: TokenPrefix and 32 random bytes in
// unpadded base64url.
func newSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return api.TokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// newTokenID returns 16 random hex digits.
func newTokenID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// checkTokenName validates a token's name: 1 to 64 letters, digits, '.',
// '_' or '-', and not of the form of an ID.
func checkTokenName(name string) error { return checkLabel("token name", name) }

// checkLabel is checkTokenName for what: a token's name or group.
func checkLabel(what, name string) error {
	if name == "" || len(name) > 64 {
		return kindf(errBadRequest, "%s %q: want 1 to 64 characters", what, name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return kindf(errBadRequest, "%s %q: use only letters, digits, '.', '_' and '-'", what, name)
		}
	}
	if _, err := hex.DecodeString(name); err == nil && len(name) == 16 {
		return kindf(errBadRequest, "%s %q looks like a token ID (16 hex digits); choose another", what, name)
	}
	return nil
}

func tokenInfo(t store.Token) api.TokenInfo {
	return api.TokenInfo{ID: t.ID, Name: t.Name, Role: t.Role, Group: t.Group, Created: t.Created, LastUsed: t.LastUsed, Revoked: t.Revoked}
}

func (s *Server) postToken(w http.ResponseWriter, r *http.Request) error {
	var req api.TokenRequest
	if err := s.readJSON(w, r, "token request", &req); err != nil {
		return err
	}
	if !api.ValidRole(req.Role) {
		return kindf(errBadRequest, "token role %q: want %s", req.Role, strings.Join(api.Roles, ", "))
	}
	secret, err := newSecret()
	if err != nil {
		return err
	}
	id, err := newTokenID()
	if err != nil {
		return err
	}
	if req.Name == "" {
		req.Name = req.Role + "-" + id[:6]
	}
	if err := checkTokenName(req.Name); err != nil {
		return err
	}
	if req.Group != "" {
		if err := checkLabel("token group", req.Group); err != nil {
			return err
		}
	}
	t, err := s.db.AddToken(r.Context(), store.Token{ID: id, Hash: tokenHash(secret), Name: req.Name, Role: req.Role, Group: req.Group})
	if errors.Is(err, store.ErrConflict) {
		return kindf(errConflict, "a token named %q exists already (braid token list); choose another name", req.Name)
	}
	if err != nil {
		return err
	}
	s.access.put(t)
	s.log.Info("token created", "token", t.ID, "name", t.Name, "role", t.Role, "group", t.Group, "by", caller(r).name)
	ans := api.TokenCreated{TokenInfo: tokenInfo(t), Token: secret}
	if s.fp != nil {
		ans.Fingerprint = api.FormatFingerprint(s.fp)
		ans.Join = api.JoinToken(secret, s.fp)
	}
	w.Header().Set("Location", api.PathTokens+"/"+t.ID)
	return writeJSON(w, http.StatusCreated, &ans)
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) error {
	ts, err := s.db.Tokens(r.Context())
	if err != nil {
		return err
	}
	list := api.TokenList{Tokens: make([]api.TokenInfo, 0, len(ts))}
	for _, t := range ts {
		list.Tokens = append(list.Tokens, tokenInfo(t))
	}
	return writeJSON(w, http.StatusOK, &list)
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) error {
	ref := r.PathValue("id")
	t, err := s.db.RevokeToken(r.Context(), ref)
	if errors.Is(err, store.ErrNotFound) {
		return kindf(errNotFound, "no token with ID or name %q; see braid token list", ref)
	}
	if errors.Is(err, store.ErrConflict) {
		return kindf(errConflict, "token %q is revoked already; nothing changed (braid token list shows when)", ref)
	}
	if err != nil {
		return err
	}
	s.access.put(t)
	s.log.Info("token revoked", "token", t.ID, "name", t.Name, "role", t.Role, "by", caller(r).name)
	return writeJSON(w, http.StatusOK, tokenInfo(t))
}
