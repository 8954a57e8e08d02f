package store

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/internal/s3test"
)

func TestParseS3(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want S3Config // Endpoint, Secure, Bucket, Prefix, Region
		bad  string   // in the error
	}{
		{spec: "s3://b/p/q?endpoint=https://h:9000&region=eu-1", want: S3Config{Endpoint: "h:9000", Secure: true, Bucket: "b", Prefix: "p/q", Region: "eu-1"}},
		{spec: "s3://b?endpoint=http://127.0.0.1:7070", want: S3Config{Endpoint: "127.0.0.1:7070", Bucket: "b"}},
		{spec: "s3://b/", want: S3Config{Endpoint: "s3.amazonaws.com", Secure: true, Bucket: "b"}},
		{spec: "s3:///p", bad: "no bucket"},
		{spec: "s3://b?endpoint=ftp://h", bad: "want https://HOST:PORT"},
		{spec: "s3://b?endpoint=h:9000", bad: "want https://HOST:PORT"},
		{spec: "s3://b?region=r&color=blue", bad: `unknown parameter "color"`},
		{spec: "s3://key:secret@b", bad: "credentials do not belong in the URL"},
	} {
		c, err := ParseS3(tc.spec)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("ParseS3(%q) = %v; want an error saying %q", tc.spec, err, tc.bad)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("ParseS3(%q): the error shows the secret: %v", tc.spec, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseS3(%q): %v", tc.spec, err)
			continue
		}
		if *c != tc.want {
			t.Errorf("ParseS3(%q) = %+v, want %+v", tc.spec, *c, tc.want)
		}
	}
}

func TestOpenBlobStoreSpecs(t *testing.T) {
	dir := t.TempDir()
	bs, err := OpenBlobStore(t.Context(), "dir:"+dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	if _, ok := bs.(*Disk); !ok || bs.String() != dir {
		t.Errorf("dir: opened %T at %s", bs, bs)
	}
	for _, spec := range []string{"", "dir:", dir, "gs://bucket", "s3:///x", "s3://b?endpoint=http://127.0.0.1:1"} {
		if _, err := OpenBlobStore(t.Context(), spec, nil); err == nil {
			t.Errorf("OpenBlobStore(%q) succeeded", spec)
		} else if !strings.Contains(err.Error(), "dir:") && !strings.Contains(err.Error(), "s3://") {
			t.Errorf("OpenBlobStore(%q): %v; the error does not say what to give", spec, err)
		}
	}
}

// TestS3Unreachable: an endpoint nothing listens on, and one that takes
// connections but never answers, fail OpenS3 with ErrUnreachable within
// the timeout instead of hanging.
func TestS3Unreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var held []net.Conn
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // read nothing, answer nothing
		}
	}()
	defer func() {
		silent.Close()
		for _, c := range held {
			c.Close()
		}
	}()
	for _, tc := range []struct{ name, endpoint string }{{"down", closed}, {"silent", silent.Addr().String()}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OpenS3(t.Context(), &S3Config{Endpoint: tc.endpoint, Bucket: "braid-bucket", AccessKey: "k", SecretKey: "s",
				Region: "us-east-1", Timeout: 300 * time.Millisecond, Logger: discardLog()})
			if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), tc.endpoint) {
				t.Errorf("OpenS3: %v; want ErrUnreachable naming %s", err, tc.endpoint)
			}
		})
	}
}

func TestS3NoCredentials(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	_, err := OpenBlobStore(t.Context(), "s3://braid-bucket/p?endpoint=http://127.0.0.1:1", nil)
	if err == nil || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Errorf("OpenBlobStore without credentials: %v; want an error naming AWS_ACCESS_KEY_ID", err)
	}
}

// TestS3CredentialsFile: without AWS_* variables, the shared credentials
// file is read.
func TestS3CredentialsFile(t *testing.T) {
	b := s3test.New(t)
	file := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(file, []byte("[default]\naws_access_key_id = "+b.AccessKey+"\naws_secret_access_key = "+b.SecretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", file)
	bs, err := OpenBlobStore(t.Context(), b.Spec("p"), &BlobStoreConfig{Logger: discardLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	if _, _, err := bs.Put(t.Context(), strings.NewReader("x")); err != nil {
		t.Error(err)
	}
	if !strings.Contains(bs.String(), b.Name) {
		t.Errorf("String() = %q does not name the bucket", bs)
	}
}

func TestS3MissingBucket(t *testing.T) {
	b := s3test.New(t)
	cfg := s3Config(b, "p")
	cfg.Bucket = b.Name + "-missing"
	_, err := OpenS3(t.Context(), cfg)
	if !errors.Is(err, ErrNoBucket) || !strings.Contains(err.Error(), cfg.Bucket) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("OpenS3 of a missing bucket: %v; want ErrNoBucket naming %s", err, cfg.Bucket)
	}
}

func TestS3WrongCredentials(t *testing.T) {
	b := s3test.New(t)
	for _, tc := range []struct{ name, access, secret string }{
		{"wrong secret", b.AccessKey, b.SecretKey + "x"},
		{"unknown key", "nobody", b.SecretKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := s3Config(b, "p")
			cfg.AccessKey, cfg.SecretKey = tc.access, tc.secret
			_, err := OpenS3(t.Context(), cfg)
			if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
				t.Errorf("OpenS3: %v; want ErrDenied telling what to check", err)
			}
			if err != nil && strings.Contains(err.Error(), tc.secret) {
				t.Errorf("the error shows the secret: %v", err)
			}
		})
	}
}

// TestS3StoreGoesAway: once open, a store that stops answering (frozen)
// or goes away (cut) makes reads and writes fail with ErrUnreachable
// within the timeout, not hang.
func TestS3StoreGoesAway(t *testing.T) {
	b := s3test.New(t)
	for _, mode := range []string{"frozen", "cut"} {
		t.Run(mode, func(t *testing.T) {
			relay := newRelay(t, b.Endpoint)
			cfg := s3Config(b, mode)
			cfg.Endpoint = relay.addr()
			cfg.Timeout = 500 * time.Millisecond
			s, err := OpenS3(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// Larger than what the sockets buffer, so a frozen store
			// stops a download halfway.
			id, _, err := s.Put(t.Context(), bytes.NewReader(pattern(24<<20)))
			if err != nil {
				t.Fatal(err)
			}
			r, _, err := s.Open(id)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if _, err := io.ReadFull(r, make([]byte, 1000)); err != nil {
				t.Fatal(err)
			}
			if mode == "cut" {
				relay.cut()
			} else {
				relay.freeze()
			}
			if _, err := io.ReadAll(r); !errors.Is(err, ErrUnreachable) {
				t.Errorf("Read: %v, want ErrUnreachable", err)
			}
			if _, err := r.ReadAt(make([]byte, 10), 5); !errors.Is(err, ErrUnreachable) {
				t.Errorf("ReadAt: %v, want ErrUnreachable", err)
			}
			if _, _, err := s.Put(t.Context(), strings.NewReader("more")); !errors.Is(err, ErrUnreachable) {
				t.Errorf("Put: %v, want ErrUnreachable", err)
			}
			if _, err := s.Stat(id); !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), relay.addr()) {
				t.Errorf("Stat: %v, want ErrUnreachable naming the endpoint", err)
			}
		})
	}
}

// relay forwards TCP connections to an address until it is frozen (it
// holds every connection and forwards nothing more) or cut (it closes
// them and refuses new ones).
type relay struct {
	ln     net.Listener
	to     string
	mu     sync.Mutex
	conns  []net.Conn
	frozen chan struct{}
	wg     sync.WaitGroup
}

func newRelay(t *testing.T, to string) *relay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, to: to, frozen: make(chan struct{})}
	r.wg.Go(r.serve)
	t.Cleanup(func() {
		r.cut()
		r.wg.Wait()
	})
	return r
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		r.conns = append(r.conns, c)
		r.mu.Unlock()
		select {
		case <-r.frozen:
			continue // hold it, answer nothing
		default:
		}
		d, err := net.Dial("tcp", r.to)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, d)
		r.mu.Unlock()
		r.wg.Go(func() { r.pipe(d, c) })
		r.wg.Go(func() { r.pipe(c, d) })
	}
}

// pipe copies from src to dst until either closes, stopping while frozen.
func (r *relay) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-r.frozen:
			io.Copy(io.Discard, src) // until cut
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (r *relay) freeze() { close(r.frozen) }

func (r *relay) cut() {
	r.ln.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}
