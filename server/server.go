package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/internal/accept"
	"github.com/braid-hpc/braid/lifecycle"
	"github.com/braid-hpc/braid/sched"
	"github.com/braid-hpc/braid/store"
	"github.com/braid-hpc/braid/transport"
)

// Server is a braid server: the control API, the job store, the scheduler
// and the data-plane sessions to the workers.
//
// Lock order: Server.mu, then run.mu, then peer.mu. The lifecycle's,
// the scheduler's and the stores' locks are leaves as far as the server
// is concerned: they call back nothing of it with them held.
type Server struct {
	cfg   Config
	log   *slog.Logger
	ln    net.Listener
	url   string
	token string // the cluster key's admin credential, api.Token
	tcfg  transport.Config
	// fp is the SHA-256 fingerprint of the control API's certificate and
	// proof the api.CertProof of it; both empty with InsecureHTTP.
	fp     []byte
	proof  string
	access accessTokens

	// blobs syncs every Put (uploads, unit data, outputs); results
	// syncs only with Config.Durable (unit results, which can be
	// computed again). Both are the same store (Config.Blobs).
	blobs   store.BlobStore
	results store.Blobs
	db      store.Meta
	sched   *sched.Scheduler
	// lc owns the life of jobs: their units' state, results, retries,
	// ends and the jobs waiting for another's output.
	lc      *lifecycle.Lifecycle
	known   knownBlobs
	userOps userOps
	// uploading counts the bytes of uploads in progress, which MaxData
	// counts as stored.
	uploading atomic.Int64
	// pins are blobs about to be referred to, which must not be removed
	// (see retain.go).
	pinMu sync.Mutex
	pins  map[string]int
	// opsMu orders the changes of user operations, so the store and
	// userOps agree on the newest version.
	opsMu sync.Mutex

	owners owners // worker ID -> the worker token that registered it

	// name names the server among those sharing its database; shared
	// is set when others may (PostgreSQL); lease is the one it holds
	// for its jobs (leases.go).
	name   string
	shared bool
	lease  leaseHolder
	// wake asks the sync loop to run now; changed fires when the
	// database notified a change (listen).
	wake    chan struct{}
	changed signal

	metrics *serverMetrics
	spans   timeline // the tries of recent jobs' units, for the dashboard

	mu      sync.Mutex
	peers   map[string]*peer // live workers by ID
	gone    map[string]death // workers declared dead since the server started, by ID
	started bool
	closing bool
	stop    chan struct{} // closed when Run begins to shut down
	beats   *beats        // heartbeats waiting to be written
	beatDB  interface {   // where they are written: db, or a test's wrapper
		Heartbeats(context.Context, []store.Beat) (int, error)
	}

	// bg counts the goroutines Run waits for: peers, the removal of
	// blobs, the reaper.
	bg sync.WaitGroup

	// backfilled is closed when the datasets made before the index of
	// members are indexed, or the server stops (backfill.go).
	backfilled chan struct{}
}

// New opens the data directory, resumes the jobs it holds and listens on
// cfg.Listen. Call Run to serve.
func New(cfg Config) (*Server, error) {
	if err := cfg.populate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:   cfg,
		log:   cfg.Logger,
		token: api.Token(cfg.Key),
		peers: map[string]*peer{},
		gone:  map[string]death{},
		stop:  make(chan struct{}),
		beats: newBeats(),
		wake:  make(chan struct{}, 1),
		sched: sched.New(sched.Config{InFlight: cfg.InFlight, MaxTries: cfg.MaxTries}),
	}
	s.metrics = newServerMetrics(s)
	s.backfilled = make(chan struct{})
	if cfg.Transport != nil {
		s.tcfg = *cfg.Transport
	}
	s.tcfg.Key = cfg.Key
	if s.tcfg.SessionTimeout == 0 {
		s.tcfg.SessionTimeout = cfg.DataPlaneTimeout
	}
	if s.tcfg.Logger == nil {
		s.tcfg.Logger = cfg.Logger
	}
	if err := os.MkdirAll(cfg.Data, 0o700); err != nil {
		return nil, fmt.Errorf("server: data directory: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	if s.blobs, err = openBlobs(ctx, &cfg); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	opened := false
	defer func() {
		if !opened {
			s.blobs.Close()
		}
	}()
	s.results = s.blobs
	if !cfg.Durable {
		s.results = s.blobs.Unsynced()
	}
	s.db, err = store.OpenMeta(ctx, cfg.metaURL(), &store.MetaOptions{Durable: cfg.Durable, StallTimeout: cfg.TakeoverAfter / 2})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	var state lifecycle.Store = s.db
	s.beatDB = s.db
	if cfg.wrapState != nil {
		w := cfg.wrapState(s.db)
		state, s.beatDB = wrappedState{s.db, w}, w
	}
	if cfg.wrapResults != nil {
		s.results = cfg.wrapResults(s.results)
	}
	s.lc = lifecycle.New(lifecycle.Config{Store: state, Sched: s.sched, Hooks: hooks{s}, Logger: s.log, Counted: cfg.counted})
	uops, err := s.db.Ops(ctx)
	if err != nil {
		s.db.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	s.userOps.load(uops)
	toks, err := s.db.Tokens(ctx)
	if err != nil {
		s.db.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	s.access.load(toks)
	var tconf *tls.Config
	if !cfg.InsecureHTTP {
		cert, generated, err := loadCert(&cfg)
		if err != nil {
			s.db.Close()
			return nil, err
		}
		s.fp = api.Fingerprint(cert.Certificate[0])
		s.proof = api.CertProof(cfg.Key, s.fp)
		if generated {
			s.log.Info("generated the control API's TLS certificate", "dir", filepath.Join(cfg.Data, tlsDir),
				"fingerprint", api.FormatFingerprint(s.fp))
		}
		tconf = &tls.Config{
			Certificates: []tls.Certificate{cert},
			MinVersion:   tls.VersionTLS13,
			NextProtos:   []string{"http/1.1"},
		}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		s.db.Close()
		return nil, fmt.Errorf("server: listen on %s: %w", cfg.Listen, err)
	}
	// net/http retries only some failed accepts, and logs each: this
	// retries them all, with one Warn an episode.
	s.ln = accept.Limit(accept.Retrying(ln, "control API", s.log), cfg.MaxConns, "control API", s.log)
	if tconf != nil {
		s.ln = tls.NewListener(s.ln, tconf)
		s.url = "https://" + s.ln.Addr().String()
	} else {
		s.url = "http://" + s.ln.Addr().String()
	}
	s.name = cfg.Name
	if s.name == "" {
		s.name = defaultName(ln.Addr())
	}
	kind, _, _ := store.ParseMetaURL(cfg.metaURL())
	s.shared = kind == store.KindPostgres
	if err := s.checkKey(ctx); err != nil {
		s.ln.Close()
		s.db.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	if err := s.acquire(ctx); err != nil {
		s.ln.Close()
		s.db.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	if err := s.claim(ctx); err != nil {
		s.ln.Close()
		s.db.Close()
		return nil, fmt.Errorf("server: resume jobs: %w", err)
	}
	opened = true
	return s, nil
}

// Name returns the server's name among the servers that share its
// database (Config.Name).
func (s *Server) Name() string { return s.name }

// URL returns the base URL of the control API, e.g.
// "https://127.0.0.1:7400" ("http://" with Config.InsecureHTTP).
func (s *Server) URL() string { return s.url }

// Fingerprint returns the SHA-256 fingerprint of the control API's TLS
// certificate, for clients to pin (api.FormatFingerprint writes it); nil
// with Config.InsecureHTTP.
func (s *Server) Fingerprint() []byte { return slices.Clone(s.fp) }

// Run serves the control API and drives the jobs until ctx ends, then shuts
// down: it stops taking requests, closes the sessions to the workers
// (their units stay unfinished in the store, to resume at the next start),
// records the results that arrived and closes the stores. A Server runs
// once.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("server: Run called twice")
	}
	s.started = true
	s.mu.Unlock()

	s.lc.Start()
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(s.ln) }()
	s.bg.Go(s.reap)
	s.bg.Go(s.preempt)
	s.bg.Go(s.writeBeats)
	s.bg.Go(s.backfill)
	if s.shared {
		s.bg.Go(s.renew)
		s.bg.Go(s.sync)
		if n, ok := s.db.(store.Notifier); ok {
			s.bg.Go(func() { s.listen(n) })
		}
	}
	if s.cfg.Retain > 0 {
		s.bg.Go(s.sweep)
	}
	if s.fp != nil {
		s.log.Info("server running", "url", s.url, "data", s.cfg.Data, "fingerprint", api.FormatFingerprint(s.fp))
	} else {
		s.log.Warn("server running WITHOUT TLS (--insecure-http): anyone on the network can read every request, "+
			"replay its credential and forge answers", "url", s.url, "data", s.cfg.Data)
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-served:
		err = fmt.Errorf("server: serve HTTP: %w", err)
	}

	// Shut down: no new requests, then no sessions, then no writers.
	s.mu.Lock()
	s.closing = true
	close(s.stop)
	s.mu.Unlock()
	s.lc.Shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if herr := hs.Shutdown(sctx); herr != nil {
		hs.Close()
	}
	cancel()
	s.mu.Lock()
	peers := make([]*peer, 0, len(s.peers))
	for _, p := range s.peers {
		peers = append(peers, p)
	}
	s.mu.Unlock()
	for _, p := range peers {
		s.drop(p, nil)
	}
	s.bg.Wait()
	s.lc.Close()
	for _, j := range s.lc.Jobs() {
		runOf(j).closeReaders()
	}
	// The jobs left are anybody's now: another server sharing the
	// database takes them at once, this one at its next start.
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	if rerr := s.db.ReleaseLease(rctx, s.lease.get()); rerr != nil {
		s.log.Warn("releasing this server's lease failed; others take its jobs when it expires", "err", rerr)
	}
	rcancel()
	if cerr := s.db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("server: close database: %w", cerr)
	}
	s.blobs.Close()
	s.log.Info("server stopped", "url", s.url)
	return err
}

// lifetime returns a context that ends when the server shuts down, for
// work that outlives the request or stream that started it.
func (s *Server) lifetime() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// knownBlobs remembers the IDs of recently stored results, so that a
// result stored before (every copy of a repeated job yields the same
// bytes) costs no file system call.
type knownBlobs struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

const maxKnownBlobs = 1 << 14

func (k *knownBlobs) has(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.ids[id]
	return ok
}

func (k *knownBlobs) add(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ids == nil || len(k.ids) >= maxKnownBlobs {
		k.ids = make(map[string]struct{})
	}
	k.ids[id] = struct{}{}
}

// forget drops id, e.g. after the blob was deleted.
func (k *knownBlobs) forget(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.ids, id)
}

// wrappedState is the job store with a test's wrapper of the writes of
// unit results and jobs' ends (InjectFaults).
type wrappedState struct {
	store.Meta
	jobs store.Jobs
}

func (w wrappedState) FinishUnits(ctx context.Context, rs []store.UnitResult) ([]bool, error) {
	return w.jobs.FinishUnits(ctx, rs)
}

func (w wrappedState) FinishJob(ctx context.Context, id uint64, output string) error {
	return w.jobs.FinishJob(ctx, id, output)
}

func (w wrappedState) FailJob(ctx context.Context, id uint64, msg string) error {
	return w.jobs.FailJob(ctx, id, msg)
}

func (w wrappedState) CancelJob(ctx context.Context, id uint64, msg string) error {
	return w.jobs.CancelJob(ctx, id, msg)
}
