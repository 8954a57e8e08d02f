package server_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/server"
)

// TestCertificateKept: the generated certificate is kept in the data
// directory, its key readable by the owner only, and served again after
// a restart; every answer carries the proof of the key for it.
func TestCertificateKept(t *testing.T) {
	c := newCluster(t, nil)
	fp := c.srv.Fingerprint()
	if !strings.HasPrefix(c.srv.URL(), "https://") || len(fp) != 32 {
		t.Fatalf("URL %s, fingerprint %x", c.srv.URL(), fp)
	}
	st, err := os.Stat(filepath.Join(c.cfg.Data, "tls", "key.pem"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", st, err)
	}
	resp, err := c.hc.Get(c.srv.URL() + api.PathHealth)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get(api.HeaderCertProof); got != api.CertProof(testKey, fp) {
		t.Errorf("proof %q", got)
	}
	if fp2 := api.Fingerprint(resp.TLS.PeerCertificates[0].Raw); string(fp2) != string(fp) {
		t.Errorf("served %x, Fingerprint() %x", fp2, fp)
	}
	old := client.New(c.srv.URL(), client.WithToken("unused"), client.WithFingerprint(fp))
	c.stopServer()
	c.startServer()
	if string(c.srv.Fingerprint()) != string(fp) {
		t.Errorf("after a restart %x, before %x", c.srv.Fingerprint(), fp)
	}
	if _, err := old.Health(t.Context()); err != nil {
		t.Errorf("a client pinned before the restart: %v", err)
	}
}

// writeCert writes a new self-signed certificate and its key to dir and
// returns their paths and the certificate's fingerprint.
func writeCert(t *testing.T, dir string) (certPath, keyPath string, fp []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath, api.Fingerprint(der)
}

// TestCertificateFromFiles: a given certificate is served, and a client
// with the key learns it from the proof.
func TestCertificateFromFiles(t *testing.T) {
	certPath, keyPath, fp := writeCert(t, t.TempDir())
	c := newCluster(t, func(cfg *server.Config) { cfg.TLSCert, cfg.TLSKey = certPath, keyPath })
	if string(c.srv.Fingerprint()) != string(fp) {
		t.Errorf("serves %x, want %x", c.srv.Fingerprint(), fp)
	}
	if _, err := c.c.Jobs(t.Context(), "", 0); err != nil {
		t.Fatal(err)
	}
	if string(c.c.Fingerprint()) != string(fp) {
		t.Errorf("client pinned %x", c.c.Fingerprint())
	}
	if _, err := os.Stat(filepath.Join(c.cfg.Data, "tls")); err == nil {
		t.Error("a certificate was generated besides the given one")
	}
}

// TestCertificateErrors: bad or partial certificate settings stop New
// with a message that says what to do.
func TestCertificateErrors(t *testing.T) {
	certPath, keyPath, _ := writeCert(t, t.TempDir())
	half := t.TempDir()
	if err := os.MkdirAll(filepath.Join(half, "tls"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(half, "tls", "cert.pem"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		mod  func(*server.Config)
		msg  string
	}{
		{"cert without key", func(c *server.Config) { c.TLSCert = certPath }, "give both"},
		{"key as cert", func(c *server.Config) { c.TLSCert, c.TLSKey = keyPath, keyPath }, "TLS certificate " + keyPath},
		{"half a pair kept", func(c *server.Config) { c.Data = half }, "holds only one of cert.pem and key.pem"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := server.Config{Listen: "127.0.0.1:0", Data: t.TempDir(), Key: testKey, Logger: testLogger()}
			tt.mod(&cfg)
			if _, err := server.New(cfg); err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("New: %v, want %q", err, tt.msg)
			}
		})
	}
}

// TestInsecureHTTP: with InsecureHTTP the API is plain HTTP, without a
// proof; clients reach it only with WithInsecureHTTP.
func TestInsecureHTTP(t *testing.T) {
	c := newCluster(t, func(cfg *server.Config) { cfg.InsecureHTTP = true })
	if !strings.HasPrefix(c.srv.URL(), "http://") || c.srv.Fingerprint() != nil {
		t.Fatalf("URL %s, fingerprint %x", c.srv.URL(), c.srv.Fingerprint())
	}
	resp, err := http.Get(c.srv.URL() + api.PathHealth)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get(api.HeaderCertProof) != "" {
		t.Error("a proof over plain HTTP")
	}
	if _, err := client.New(c.srv.URL(), client.WithKey(testKey), client.WithInsecureHTTP()).Jobs(t.Context(), "", 0); err != nil {
		t.Errorf("insecure client: %v", err)
	}
	if _, err := c.c.Jobs(t.Context(), "", 0); err == nil {
		t.Error("an HTTPS client reached a plain HTTP server")
	}
}
