package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files of the generated certificate, under Config.Data.
const (
	tlsDir      = "tls"
	tlsCertFile = "cert.pem"
	tlsKeyFile  = "key.pem"
)

// certValidity is how long a generated certificate is valid. Clients
// pin its fingerprint, so its dates matter only to other tools (curl
// --cacert).
const certValidity = 10 * 365 * 24 * time.Hour

// loadCert returns the control API's certificate: the one Config names,
// else the one generated on a first start and kept in Data/tls, else a
// new one, which it keeps there. generated reports a new one.
func loadCert(cfg *Config) (cert tls.Certificate, generated bool, err error) {
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		if cfg.TLSCert == "" || cfg.TLSKey == "" {
			return cert, false, errors.New("server: give both the TLS certificate and its key (--tls-cert and --tls-key), or neither to use a generated one")
		}
		cert, err = tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return cert, false, fmt.Errorf("server: TLS certificate %s with key %s: %w", cfg.TLSCert, cfg.TLSKey, err)
		}
		return cert, false, nil
	}
	dir := filepath.Join(cfg.Data, tlsDir)
	certPath, keyPath := filepath.Join(dir, tlsCertFile), filepath.Join(dir, tlsKeyFile)
	_, cerr := os.Stat(certPath)
	_, kerr := os.Stat(keyPath)
	switch {
	case cerr == nil && kerr == nil:
		cert, err = tls.LoadX509KeyPair(certPath, keyPath)
		if err != nil {
			return cert, false, fmt.Errorf("server: the generated TLS certificate in %s: %w; remove %s and %s to generate a new one "+
				"(clients that pinned the old one by fingerprint need the new one)", dir, err, tlsCertFile, tlsKeyFile)
		}
		return cert, false, nil
	case errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist):
	case cerr == nil || kerr == nil:
		return cert, false, fmt.Errorf("server: %s holds only one of %s and %s; restore the other, or remove it to generate a new certificate",
			dir, tlsCertFile, tlsKeyFile)
	default:
		return cert, false, fmt.Errorf("server: TLS certificate in %s: %w", dir, errors.Join(cerr, kerr))
	}
	certPEM, keyPEM, err := newCert(cfg.Listen, time.Now())
	if err != nil {
		return cert, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return cert, false, fmt.Errorf("server: TLS certificate: %w", err)
	}
	// The key first: a certificate without its key is refused above.
	if err := writeFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return cert, false, fmt.Errorf("server: TLS key: %w", err)
	}
	if err := writeFileAtomic(certPath, certPEM, 0o644); err != nil {
		return cert, false, fmt.Errorf("server: TLS certificate: %w", err)
	}
	cert, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return cert, false, fmt.Errorf("server: generated TLS certificate: %w", err)
	}
	return cert, true, nil
}

// newCert makes a self-signed ECDSA P-256 certificate for the host of
// listen, the loopback addresses, localhost and the host name, in PEM.
func newCert(listen string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("server: TLS key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("server: TLS certificate: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "braid server"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // its own root, so curl --cacert cert.pem accepts it
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	if host, _, err := net.SplitHostPort(listen); err == nil && host != "" {
		if ip := net.ParseIP(host); ip == nil {
			tmpl.DNSNames = append(tmpl.DNSNames, host)
		} else if !ip.IsUnspecified() && !ip.IsLoopback() {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		}
	}
	if name, err := os.Hostname(); err == nil && name != "" && name != "localhost" {
		tmpl.DNSNames = append(tmpl.DNSNames, name)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("server: TLS certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("server: TLS key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// writeFileAtomic writes b to path through a temporary file, so a crash
// leaves the old file or the new one, never a part.
func writeFileAtomic(path string, b []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	if werr == nil {
		werr = f.Chmod(perm)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
	}
	return werr
}
