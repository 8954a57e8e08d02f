package client

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
)

// tlsServer is an HTTPS server that answers every request with an empty
// operation list and records the Authorization headers it saw, by path.
// proof, if set, makes its certificate proof header.
type tlsServer struct {
	*httptest.Server
	mu    sync.Mutex
	auth  []string // "path auth"
	cert  atomic.Pointer[tls.Certificate]
	proof func(fp []byte) string
}

func newTLSServer(t *testing.T, proof func(fp []byte) string) *tlsServer {
	t.Helper()
	s := &tlsServer{proof: proof}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.URL.Path+" "+r.Header.Get("Authorization"))
		s.mu.Unlock()
		if s.proof != nil {
			w.Header().Set(api.HeaderCertProof, s.proof(api.Fingerprint(s.cert.Load().Certificate[0])))
		}
		json.NewEncoder(w).Encode(api.OpList{})
	}))
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	s.StartTLS()
	cert := s.TLS.Certificates[0]
	s.cert.Store(&cert)
	s.TLS.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.cert.Load(), nil }
	s.TLS.Certificates = nil
	t.Cleanup(s.Close)
	return s
}

func (s *tlsServer) fp() []byte { return api.Fingerprint(s.cert.Load().Certificate[0]) }

func (s *tlsServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// credentialSent reports whether any request carried a credential.
func (s *tlsServer) credentialSent() bool {
	for _, a := range s.seen() {
		if !strings.HasSuffix(a, " ") {
			return true
		}
	}
	return false
}

var testKey = []byte("client test cluster key")

// TestPinByKeyProof: with the cluster key the client first asks for the
// health check without credential, checks the proof for the certificate
// it saw, and only then sends the key's token.
func TestPinByKeyProof(t *testing.T) {
	s := newTLSServer(t, func(fp []byte) string { return api.CertProof(testKey, fp) })
	c := New(s.URL, WithKey(testKey))
	if _, err := c.Ops(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := []string{api.PathHealth + " ", api.PathOps + " Bearer " + api.Token(testKey)}
	if got := s.seen(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("requests %q, want %q", got, want)
	}
	if !equalBytes(c.Fingerprint(), s.fp()) {
		t.Errorf("pinned %x, want %x", c.Fingerprint(), s.fp())
	}
	// A token is sent instead of the key's, still pinned by the key.
	c = New(s.URL, WithKey(testKey), WithToken("braid_tok"))
	if _, err := c.Ops(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := s.seen(); got[len(got)-1] != api.PathOps+" Bearer braid_tok" {
		t.Errorf("requests %q", got)
	}
}

// TestPinRefusals: a server that cannot prove the key for its own
// certificate, or whose certificate is not the pinned one, gets no
// credential.
func TestPinRefusals(t *testing.T) {
	tests := []struct {
		name  string
		proof func(fp []byte) string
		opts  []Option
		want  error
	}{
		{"other key", func(fp []byte) string { return api.CertProof([]byte("another cluster key"), fp) },
			[]Option{WithKey(testKey)}, ErrCertificate},
		{"no proof", nil, []Option{WithKey(testKey)}, ErrCertificate},
		// A man in the middle relays the real server's proof: it is for
		// another certificate.
		{"proof of another certificate", func([]byte) string { return api.CertProof(testKey, make([]byte, 32)) },
			[]Option{WithKey(testKey)}, ErrCertificate},
		{"wrong fingerprint", nil, []Option{WithToken("braid_tok"), WithFingerprint(make([]byte, 32))}, ErrCertificate},
		{"wrong fingerprint in a join token", nil, []Option{WithToken(api.JoinToken("braid_tok", make([]byte, 32)))}, ErrCertificate},
		// The fingerprint wins over the key: the key's proof is not asked.
		{"wrong fingerprint with the key", func(fp []byte) string { return api.CertProof(testKey, fp) },
			[]Option{WithKey(testKey), WithFingerprint(make([]byte, 32))}, ErrCertificate},
		{"nothing to pin with", nil, []Option{WithToken("braid_tok")}, ErrNoPin},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTLSServer(t, tt.proof)
			_, err := New(s.URL, tt.opts...).Ops(t.Context())
			if !errors.Is(err, tt.want) {
				t.Errorf("Ops = %v, want %v", err, tt.want)
			}
			if s.credentialSent() {
				t.Errorf("a credential was sent: %q", s.seen())
			}
		})
	}
}

// TestPinByFingerprint: a fingerprint, given or in a join token, pins
// without the key; the first request already carries the token.
func TestPinByFingerprint(t *testing.T) {
	s := newTLSServer(t, nil)
	for _, c := range []*Client{
		New(s.URL, WithToken("braid_tok"), WithFingerprint(s.fp())),
		New(s.URL, WithToken(api.JoinToken("braid_tok", s.fp()))),
		// An explicit fingerprint wins over the join token's.
		New(s.URL, WithFingerprint(s.fp()), WithToken(api.JoinToken("braid_tok", make([]byte, 32)))),
	} {
		if _, err := c.Ops(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range s.seen() {
		if a != api.PathOps+" Bearer braid_tok" {
			t.Errorf("request %q", a)
		}
	}
	if _, err := New(s.URL, WithToken("braid_tok.abc")).Ops(t.Context()); !errors.Is(err, api.ErrFingerprint) {
		t.Errorf("bad join token: %v", err)
	}
}

// TestRelearn: a certificate learned from the key's proof that the server
// replaced (set up anew) is learned again, and the request goes through.
func TestRelearn(t *testing.T) {
	s := newTLSServer(t, func(fp []byte) string { return api.CertProof(testKey, fp) })
	c := New(s.URL, WithKey(testKey))
	if _, err := c.Ops(t.Context()); err != nil {
		t.Fatal(err)
	}
	old := c.Fingerprint()
	cert := newCert(t)
	s.cert.Store(&cert)
	s.CloseClientConnections()
	if _, err := c.Ops(t.Context()); err != nil {
		t.Fatal(err)
	}
	if equalBytes(c.Fingerprint(), old) || !equalBytes(c.Fingerprint(), s.fp()) {
		t.Errorf("pinned %x after the change, want %x", c.Fingerprint(), s.fp())
	}
	// A given fingerprint is not replaced.
	c = New(s.URL, WithKey(testKey), WithFingerprint(old))
	if _, err := c.Ops(t.Context()); !errors.Is(err, ErrCertificate) {
		t.Errorf("stale fingerprint: %v", err)
	}
}

func equalBytes(a, b []byte) bool { return string(a) == string(b) }

// newCert returns a new self-signed certificate for 127.0.0.1.
func newCert(t testing.TB) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
