package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
)

// stalledServer is the address of a server that is stopped (SIGSTOP) or
// hung: the kernel completes TCP connections to it, and nothing ever
// answers. It listens and never accepts.
func stalledServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// goodServer answers the health check and uploads, counting the uploads.
// With a proof, its answers carry it (the cluster key's proof of the
// server's certificate).
func goodServer(posts *atomic.Int32, proof ...func() string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(proof) > 0 {
			w.Header().Set(api.HeaderCertProof, proof[0]())
		}
		switch r.Method {
		case http.MethodPost:
			posts.Add(1)
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(api.BlobInfo{ID: strings.Repeat("ab", 32), Size: 5})
		default:
			json.NewEncoder(w).Encode(api.Health{Status: "ok", Workers: 7})
		}
	})
}

// TestFailoverFromStalledServer: a client of two servers whose first is
// stalled moves to the second within its failover time: a GET that gets
// no answer is sent again there, and so is an upload whose TLS handshake
// never finished (it cannot have arrived). An upload written to a
// stalled server's open connection is not sent again: it may have
// arrived. With the cluster key, learning a stalled server's certificate
// times out the same way. (Without the failover time, the GET, and the
// upload with the key, wait for the caller's deadline and fail.)
func TestFailoverFromStalledServer(t *testing.T) {
	const after = 2 * time.Second
	t.Run("http", func(t *testing.T) {
		var posts atomic.Int32
		good := httptest.NewServer(goodServer(&posts))
		defer good.Close()
		c := New("http://"+stalledServer(t)+","+good.URL, WithInsecureHTTP(), WithToken("t"), WithFailoverAfter(after))
		ctx, cancel := context.WithTimeout(t.Context(), 6*after)
		defer cancel()
		h, err := c.Health(ctx)
		if err != nil || h.Workers != 7 {
			t.Fatalf("health through a group whose first server is stalled: %+v, %v", h, err)
		}
		if c.URL() != good.URL {
			t.Errorf("after failover requests go to %s; want %s", c.URL(), good.URL)
		}

		// An upload sent to a stalled server's connection stays there.
		c = New("http://"+stalledServer(t)+","+good.URL, WithInsecureHTTP(), WithToken("t"), WithFailoverAfter(after))
		pctx, pcancel := context.WithTimeout(t.Context(), after/2)
		defer pcancel()
		if _, err := c.Put(pctx, strings.NewReader("hello")); err == nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("upload to a stalled server over plain HTTP: %v; want the caller's deadline", err)
		}
		if n := posts.Load(); n != 0 {
			t.Errorf("the upload written to the stalled server was sent again to the next (%d times)", n)
		}
	})
	t.Run("tls", func(t *testing.T) {
		var posts atomic.Int32
		good := httptest.NewTLSServer(goodServer(&posts))
		defer good.Close()
		fp := api.Fingerprint(good.Certificate().Raw)
		c := New("https://"+stalledServer(t)+","+good.URL, WithFingerprint(fp), WithToken("t"), WithFailoverAfter(after))
		ctx, cancel := context.WithTimeout(t.Context(), 6*after)
		defer cancel()
		start := time.Now()
		id, err := c.Put(ctx, strings.NewReader("hello"))
		if err != nil || id == "" || posts.Load() != 1 {
			t.Fatalf("upload through a group whose first server is stalled: %q, %v, %d posts", id, err, posts.Load())
		}
		if took := time.Since(start); took < after {
			t.Errorf("the upload moved on after %v, before the failover time %v", took, after)
		}
	})
	t.Run("key", func(t *testing.T) {
		// Pinned by the key's proof: the client first learns each
		// server's certificate, which a stalled server never shows.
		key := []byte("a cluster key of the failover test, 32+ bytes")
		var posts atomic.Int32
		var good *httptest.Server
		good = httptest.NewTLSServer(goodServer(&posts, func() string {
			return api.CertProof(key, api.Fingerprint(good.Certificate().Raw))
		}))
		defer good.Close()
		c := New("https://"+stalledServer(t)+","+good.URL, WithKey(key), WithFailoverAfter(after))
		ctx, cancel := context.WithTimeout(t.Context(), 6*after)
		defer cancel()
		id, err := c.Put(ctx, strings.NewReader("hello"))
		if err != nil || id == "" || posts.Load() != 1 {
			t.Fatalf("upload through a group whose first server is stalled: %q, %v, %d posts", id, err, posts.Load())
		}
	})
}
