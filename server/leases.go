package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/braid-hpc/braid/store"
)

// Several servers may share one PostgreSQL database and one object
// store. Each holds a lease, "server/NAME", renewed every third of
// Config.TakeoverAfter; the jobs it accepts carry its name and its
// lease's epoch, and it alone places their units and writes their
// progress (store.Fenced). Every Config.SyncInterval each server takes
// over the unfinished jobs whose owner's lease ran out (store.ClaimJobs)
// and resumes them as a restarted server resumes its own, lets go of
// the jobs a client canceled through another server or that another
// server took over (lifecycle.Sweep), releases the jobs that waited for
// a job that ended elsewhere, and reloads the tokens and operations. A
// server whose lease expired (it stalled) finds its writes refused,
// lets go of every job and acquires a new lease. Retention runs on one
// server at a time, under the lease "retention".
//
// Over SQLite the one server holds its lease for good and takes every
// unfinished job at start.

// leaseFor is the lease a server holds for its jobs.
func leaseFor(name string) string { return "server/" + name }

// forever is the lease of a server over SQLite, which nobody shares.
const forever = 100 * 365 * 24 * time.Hour

// leaseHolder keeps the server's current lease.
type leaseHolder struct {
	mu sync.Mutex
	l  store.Lease
}

func (h *leaseHolder) get() store.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.l
}

func (h *leaseHolder) set(l store.Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.l = l
}

// defaultName is HOST:PORT of the control API's listener.
func defaultName(ln net.Addr) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "braid"
	}
	_, port, err := net.SplitHostPort(ln.String())
	if err != nil {
		return host
	}
	return net.JoinHostPort(host, port)
}

// leaseTTL is how long the server's lease lasts between renewals.
func (s *Server) leaseTTL() time.Duration {
	if !s.shared {
		return forever
	}
	return s.cfg.TakeoverAfter
}

// acquire takes the server's lease with a new epoch: the jobs of its
// earlier epochs are anybody's to claim, its own first.
func (s *Server) acquire(ctx context.Context) error {
	l, err := s.db.AcquireLease(ctx, leaseFor(s.name), s.name, s.leaseTTL())
	if err != nil {
		return err
	}
	s.lease.set(l)
	s.lc.SetEpoch(l.Epoch)
	return nil
}

// claim takes over the jobs no live server owns (over SQLite, every
// unfinished job) and resumes them.
func (s *Server) claim(ctx context.Context) error {
	jobs, err := s.db.ClaimJobs(ctx, s.lease.get(), !s.shared)
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		return nil
	}
	if s.isRunning() {
		s.log.Info("taking over jobs whose server stopped", "jobs", len(jobs))
	}
	return s.resume(ctx, jobs)
}

// isRunning reports whether Run began.
func (s *Server) isRunning() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// renew keeps the server's lease, every third of its term, while the
// server runs. A lease that ran out (the server stalled, or lost the
// database for longer than its term) is gone: the server lets go of its
// jobs, which others may have taken, acquires a new lease and claims
// what is left.
func (s *Server) renew() {
	every := s.cfg.TakeoverAfter / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		l, err := s.db.RenewLease(ctx, s.lease.get(), s.cfg.TakeoverAfter)
		switch {
		case err == nil:
			s.lease.set(l)
		case errors.Is(err, store.ErrFenced):
			s.log.Error("this server's lease ran out (it stalled or lost the database); letting go of its jobs", "err", err)
			s.lc.LetGoAll("this server's lease ran out")
			if err := s.acquire(ctx); err != nil {
				s.log.Error("acquiring a new lease failed; trying again", "err", err)
			} else if err := s.claim(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("claiming jobs failed; trying again", "err", err)
			}
		default:
			s.log.Warn("renewing this server's lease failed; trying again", "err", err,
				"expires", s.lease.get().Expires)
		}
		cancel()
	}
}

// sync brings the server in line with the others sharing its database,
// every Config.SyncInterval (see the top of this file).
func (s *Server) sync() {
	t := time.NewTicker(s.cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.wake:
		}
		ctx, cancel := s.lifetime()
		ctx, cancel2 := context.WithTimeout(ctx, 4*s.cfg.SyncInterval)
		if err := s.syncOnce(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("syncing with the other servers failed; trying again", "err", err)
		}
		cancel2()
		cancel()
	}
}

func (s *Server) syncOnce(ctx context.Context) error {
	if err := s.claim(ctx); err != nil && !errors.Is(err, store.ErrFenced) {
		return fmt.Errorf("take over jobs: %w", err)
	}
	if err := s.lc.Sweep(ctx); err != nil {
		return fmt.Errorf("check jobs: %w", err)
	}
	toks, err := s.db.Tokens(ctx)
	if err != nil {
		return err
	}
	s.access.load(toks)
	s.opsMu.Lock()
	defer s.opsMu.Unlock()
	uops, err := s.db.Ops(ctx)
	if err != nil {
		return err
	}
	s.userOps.load(uops)
	return nil
}

// singleton reports whether this server should do the singleton work
// named name now: it holds the lease name (acquired or renewed here
// for ttl). Over SQLite it always does.
func (s *Server) singleton(ctx context.Context, name string, ttl time.Duration) bool {
	if !s.shared {
		return true
	}
	_, err := s.db.AcquireLease(ctx, name, s.name, ttl)
	return err == nil
}

// keyLease is the lease that records, as its holder, a check of the
// cluster key of the servers sharing a database (keyCheck): a server
// with another key refuses to start rather than serve workers and
// clients the others do not know.
const keyLease = "cluster/key"

// keyCheck is a value that tells cluster keys apart without revealing
// them.
func keyCheck(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("braid shared database key check v1"))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// checkKey makes sure every server sharing the database has the same
// cluster key.
func (s *Server) checkKey(ctx context.Context) error {
	if !s.shared {
		return nil
	}
	_, err := s.db.AcquireLease(ctx, keyLease, keyCheck(s.cfg.Key), forever)
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("the database %s is shared by servers with another cluster key: give this server the same key "+
			"(BRAID_KEY or --key-file) as the others", store.Redact(s.cfg.DB))
	}
	return err
}

// listen wakes the sync loop and the waits for other servers' jobs on
// every change the database notifies (store.Notifier), until the server
// stops; a lost connection is opened again. Polling stays the fallback.
func (s *Server) listen(n store.Notifier) {
	ctx, cancel := s.lifetime()
	defer cancel()
	for {
		err := n.Listen(ctx, func(job uint64) {
			select {
			case s.wake <- struct{}{}:
			default:
			}
			s.changed.fire()
		})
		if ctx.Err() != nil {
			return
		}
		s.log.Debug("listening for the other servers' changes failed; polling until it works again", "err", err)
		t := time.NewTimer(s.cfg.SyncInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// signal wakes everyone waiting on it at once.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next fire.
func (g *signal) wait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
	return g.ch
}

func (g *signal) fire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
}
