package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/store/storetest"
	"github.com/braid-hpc/braid/worker"
)

var testKey = []byte("server-test-cluster-key-0123456789")

// testLogger discards logs unless BRAID_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("BRAID_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// cluster is a server and its workers in this process, on loopback.
type cluster struct {
	t       testing.TB
	cfg     server.Config
	srv     *server.Server
	stopSrv func()
	c       *client.Client
	// hc sends raw requests to the server, accepting only its
	// certificate.
	hc      *http.Client
	workers []*testWorker
}

// pinnedHTTP returns an HTTP client that accepts only the certificate
// with fingerprint fp (any over plain HTTP, fp nil).
func pinnedHTTP(fp []byte) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, // the fingerprint is checked instead
		VerifyConnection: func(cs tls.ConnectionState) error {
			if got := api.Fingerprint(cs.PeerCertificates[0].Raw); !bytes.Equal(got, fp) {
				return fmt.Errorf("certificate %x, want %x", got, fp)
			}
			return nil
		},
	}}}
}

type testWorker struct {
	w      *worker.Worker
	cancel context.CancelFunc
	done   chan error
}

// stop stops the worker and returns what Run returned.
func (tw *testWorker) stop() error {
	tw.cancel()
	select {
	case err := <-tw.done:
		tw.done <- err
		return err
	case <-time.After(10 * time.Second):
		return context.DeadlineExceeded
	}
}

// newCluster starts a server on a fresh data directory; mod adjusts its
// Config.
func newCluster(t testing.TB, mod func(*server.Config)) *cluster {
	t.Helper()
	cfg := server.Config{
		Listen:            "127.0.0.1:0",
		Data:              t.TempDir(),
		Key:               testKey,
		HeartbeatInterval: 50 * time.Millisecond,
		WorkerTimeout:     400 * time.Millisecond,
		// The default (1.5s) can end the session of a worker that a
		// loaded test machine starved of CPU; the tests of the default
		// set it back.
		DataPlaneTimeout: 5 * time.Second,
		Logger:           testLogger(),
	}
	if mod != nil {
		mod(&cfg)
	}
	c := &cluster{t: t, cfg: cfg}
	c.startServer()
	t.Cleanup(func() {
		for _, w := range c.workers {
			w.stop()
		}
		c.stopServer()
	})
	return c
}

func (c *cluster) startServer() {
	c.t.Helper()
	srv, err := server.New(c.cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	c.srv = srv
	_, c.cfg.Listen, _ = strings.Cut(srv.URL(), "://") // a restart comes back on the same port
	c.c = client.New(srv.URL(), client.WithKey(testKey))
	c.hc = pinnedHTTP(srv.Fingerprint())
	c.stopSrv = func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				c.t.Errorf("server Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			c.t.Error("server did not stop within 15s")
		}
	}
}

func (c *cluster) stopServer() {
	if c.stopSrv != nil {
		c.stopSrv()
		c.stopSrv = nil
	}
}

// addWorker starts a worker lending threads; mod adjusts its Config.
func (c *cluster) addWorker(threads int, mod func(*worker.Config)) *testWorker {
	c.t.Helper()
	cfg := worker.Config{
		Servers:       []string{c.srv.URL()},
		Key:           testKey,
		Threads:       threads,
		Listen:        []string{"127.0.0.1:0"},
		Logger:        testLogger(),
		RetryInterval: 20 * time.Millisecond,
	}
	if mod != nil {
		mod(&cfg)
	}
	w, err := worker.New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tw := &testWorker{w: w, cancel: cancel, done: make(chan error, 1)}
	go func() { tw.done <- w.Run(ctx) }()
	c.workers = append(c.workers, tw)
	return tw
}

// waitWorkers waits until the server has n live workers.
func (c *cluster) waitWorkers(n int) {
	c.t.Helper()
	var h api.Health
	var err error
	if !testwait.Until(10*time.Second, func() bool {
		h, err = c.c.Health(context.Background())
		return err == nil && h.Workers == n
	}) {
		c.t.Fatalf("server has %d live workers after 10s, want %d (err %v)", h.Workers, n, err)
	}
}

// as returns c seen through cl: its put, submit and the rest send cl's
// credential, so what they make is cl's owner's.
func (c *cluster) as(cl *client.Client) *cluster {
	v := *c
	v.c = cl
	return &v
}

func (c *cluster) put(data []byte) string {
	c.t.Helper()
	id, err := c.c.Put(context.Background(), bytes.NewReader(data))
	if err != nil {
		c.t.Fatal(err)
	}
	return id
}

func (c *cluster) get(id string) []byte {
	c.t.Helper()
	var buf bytes.Buffer
	if _, err := c.c.Get(context.Background(), id, &buf); err != nil {
		c.t.Fatal(err)
	}
	return buf.Bytes()
}

// submit submits a job and fails the test on error.
func (c *cluster) submit(req api.JobRequest) api.JobStatus {
	c.t.Helper()
	st, err := c.c.Submit(context.Background(), req)
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

// wait waits up to 20s for a job to be final.
func (c *cluster) wait(id uint64) api.JobStatus {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := c.c.Wait(ctx, id, nil)
	if err != nil {
		c.t.Fatalf("job %d: %v (last status %+v)", id, err, st)
	}
	return st
}

// run submits a job and waits for it.
func (c *cluster) run(req api.JobRequest) api.JobStatus {
	c.t.Helper()
	return c.wait(c.submit(req).Job)
}

// noopOps is the built-in registry cut down to noop, for workers of tests
// that only need units to come back.
func noopOps(t testing.TB) *ops.Registry {
	t.Helper()
	r, err := ops.Builtin().Subset("noop")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// bothStores returns, by name, the metadata stores tests run against:
// SQLite, and PostgreSQL where BRAID_TEST_POSTGRES names one (else its
// subtests skip, or fail under BRAID_REQUIRE_POSTGRES).
func bothStores() map[string]func(testing.TB) storetest.Backend {
	return map[string]func(testing.TB) storetest.Backend{
		"sqlite":   func(testing.TB) storetest.Backend { return storetest.SQLite() },
		"postgres": storetest.Postgres,
	}
}
