package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/store"
	"github.com/braid-hpc/braid/transport"
)

// figuresTimeout bounds how long the server waits for a worker's answer
// to a figures request.
const figuresTimeout = 10 * time.Second

// registration is the answer to a registration or a heartbeat.
func (s *Server) registration(id string) api.Registration {
	every, timeout := s.beatTimes()
	return api.Registration{
		Worker:          id,
		HeartbeatMillis: every.Milliseconds(),
		TimeoutMillis:   timeout.Milliseconds(),
	}
}

// beatTimes returns the heartbeat interval the server asks of its
// workers now, and the silence after which it declares one dead: the
// configured ones, both lengthened in proportion when the live workers
// beating at that interval would send more than MaxHeartbeats a second.
// Workers learn the interval from the answer to each heartbeat, so it
// follows the cluster's size within one beat.
func (s *Server) beatTimes() (every, timeout time.Duration) {
	s.mu.Lock()
	n := len(s.peers)
	s.mu.Unlock()
	every = max(s.cfg.HeartbeatInterval, time.Duration(n)*time.Second/time.Duration(s.cfg.MaxHeartbeats))
	scale := float64(every) / float64(s.cfg.HeartbeatInterval)
	return every, time.Duration(float64(s.cfg.WorkerTimeout) * scale)
}

// checkRegister validates what a worker registers.
func (s *Server) checkRegister(reg *api.Register) error {
	switch {
	case len(reg.Addresses) == 0:
		return kindf(errBadRequest, "registration: no data-plane addresses; give one host:port per network (braid worker --listen)")
	case len(reg.Addresses) > 64:
		return kindf(errBadRequest, "registration: %d addresses, at most 64", len(reg.Addresses))
	case reg.Threads < 1 || reg.Threads > s.cfg.MaxThreads:
		return kindf(errBadRequest, "registration: threads %d: want 1 to %d", reg.Threads, s.cfg.MaxThreads)
	case len(reg.Ops) == 0:
		return kindf(errBadRequest, "registration: no operations; a worker must offer at least one (GET %s lists them)", api.PathOps)
	case reg.Cores < 0 || reg.Memory < 0 || reg.Disk < 0 || reg.CPUMHz < 0:
		return kindf(errBadRequest, "registration: cores, memory, disk and cpu_mhz must not be negative")
	case len(reg.Name) > 256:
		return kindf(errBadRequest, "registration: name longer than 256 bytes")
	}
	for _, a := range reg.Addresses {
		host, port, err := net.SplitHostPort(a)
		if err != nil || port == "" || port == "0" {
			return kindf(errBadRequest, "registration: address %q: want host:port with a fixed port", a)
		}
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			return kindf(errBadRequest, "registration: address %q: give the worker's own address on the network, one the server can reach, not a wildcard", a)
		}
	}
	for _, op := range reg.Ops {
		if op == api.ModuleOps {
			continue
		}
		if _, known := s.userOps.get(op); known {
			continue
		}
		if _, err := s.cfg.Ops.Lookup(op); err != nil {
			s.log.Warn("worker offers an operation this server does not know; it gets units of it once a module of that name is added (braid op add)", "op", op)
		}
	}
	return nil
}

// checkOwned refuses a registration whose data-plane addresses the
// registering connection could not own, so that a worker token cannot
// make the server dial somebody else's service: each address must be the
// connection's source address or lie in --worker-networks. The cluster
// key's holders and admin tokens are trusted with any address; so is a
// registration made inside the server (no source).
func (s *Server) checkOwned(reg *api.Register, who principal, source string) error {
	if who.role == api.RoleAdmin || source == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(source)
	if err != nil {
		host = source
	}
	src, err := netip.ParseAddr(host)
	if err != nil {
		return kindf(errBadRequest, "registration: cannot tell the address it came from (%q)", source)
	}
	src = src.Unmap()
	for _, a := range reg.Addresses {
		h, _, _ := net.SplitHostPort(a) // checkRegister vetted the form
		ip, err := netip.ParseAddr(h)
		if err != nil {
			return kindf(errForbidden, "registration: address %q: a worker token must give IP addresses, not names "+
				"(the server dials only addresses the registering worker could own)", a)
		}
		ip = ip.Unmap()
		if ip == src || slices.ContainsFunc(s.cfg.WorkerNetworks, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			continue
		}
		return kindf(errForbidden, "registration: address %q is neither the address this registration came from (%s) "+
			"nor inside the networks the server allows (braid server --worker-networks CIDR,...); "+
			"the server dials only addresses the registering worker could own", a, src)
	}
	return nil
}

// register registers a new worker (id empty) or updates worker id. A new
// worker, or one whose addresses changed or that the server does not hold
// live (it was declared dead, or the server restarted), gets a new
// data-plane session; the registration fails if the server cannot open
// it. who and source are the registration's sender and its address
// (checkOwned); an empty source is the server's own.
func (s *Server) register(ctx context.Context, id string, reg api.Register, who principal, source string) (api.Registration, error) {
	if err := s.checkRegister(&reg); err != nil {
		return api.Registration{}, err
	}
	if err := s.checkOwned(&reg, who, source); err != nil {
		return api.Registration{}, err
	}
	if id != "" {
		if _, err := s.db.Worker(ctx, id); errors.Is(err, store.ErrNotFound) {
			return api.Registration{}, kindf(errNotFound, "no worker %s on this server; register anew with POST %s", id, api.PathWorkers)
		} else if err != nil {
			return api.Registration{}, err
		}
	}
	s.mu.Lock()
	closing, p := s.closing, s.peers[id]
	s.mu.Unlock()
	if closing {
		return api.Registration{}, kindf(errUnavailable, "the server is shutting down; register again once it is back")
	}
	if p != nil && slices.Equal(p.addresses(), reg.Addresses) {
		if _, err := s.db.RegisterWorker(ctx, storeWorker(id, reg)); err != nil {
			return api.Registration{}, err
		}
		p.seen()
		s.update(p, reg)
		return s.registration(id), nil
	}
	sess, err := s.dial(ctx, reg.Addresses)
	if err != nil {
		return api.Registration{}, err
	}
	rec, err := s.db.RegisterWorker(ctx, storeWorker(id, reg))
	if err != nil {
		sess.Close()
		return api.Registration{}, err
	}
	if err := s.startPeer(rec.ID, reg, sess); err != nil {
		return api.Registration{}, err
	}
	if id == "" {
		s.replaceDead(ctx, rec.ID, reg)
	}
	s.log.Info("worker registered", "worker", rec.ID, "name", reg.Name, "path", strings.Join(reg.Addresses, ","),
		"threads", reg.Threads, "ops", strings.Join(reg.Ops, ","))
	return s.registration(rec.ID), nil
}

func storeWorker(id string, reg api.Register) store.Worker {
	return store.Worker{ID: id, Name: reg.Name, Addresses: reg.Addresses, Cores: reg.Cores, Memory: reg.Memory,
		Disk: reg.Disk, CPUMHz: reg.CPUMHz, Threads: reg.Threads, Ops: reg.Ops}
}

// dial opens a data-plane session to a worker, one path per address.
func (s *Server) dial(ctx context.Context, addrs []string) (*transport.Session, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	paths := make([]transport.Path, len(addrs))
	for i, a := range addrs {
		paths[i] = transport.Path{Remote: a}
	}
	sess, err := transport.Dial(ctx, paths, &s.tcfg)
	switch {
	case errors.Is(err, transport.ErrAuth):
		return nil, fmt.Errorf("registration rejected: the server cannot authenticate to the worker's data plane at %s: %w",
			strings.Join(addrs, ","), err)
	case err != nil:
		return nil, kindf(errUnreachable, "registration rejected: the server cannot reach the worker's data plane at %s: %v; "+
			"the worker must listen on addresses the server can reach (braid worker --listen)", strings.Join(addrs, ","), err)
	}
	return sess, nil
}

// heartbeat notes a worker's sign of life.
func (s *Server) heartbeat(ctx context.Context, id string, hb api.Heartbeat) (api.Registration, error) {
	s.mu.Lock()
	p := s.peers[id]
	s.mu.Unlock()
	if p == nil {
		return api.Registration{}, kindf(errNotFound, "worker %s is not registered with this server "+
			"(declared dead, deregistered, or the server restarted); register again", id)
	}
	if err := s.noteBeat(p, hb, beatHTTP); err != nil {
		return api.Registration{}, err
	}
	return s.registration(id), nil
}

// How a heartbeat came, for braid_heartbeats_total.
const (
	beatDataPlane = "data_plane"
	beatHTTP      = "http"
)

// noteBeat books a heartbeat of live worker p that came via beatHTTP or
// beatDataPlane (beatPeer).
func (s *Server) noteBeat(p *peer, hb api.Heartbeat, via string) error {
	if hb.Running < 0 || hb.Queued < 0 {
		return kindf(errBadRequest, "heartbeat: running and queued must not be negative")
	}
	p.seen()
	now := time.Now()
	p.mu.Lock()
	p.computing = hb.Jobs
	if !p.lastBeat.IsZero() {
		p.maxBeatGap = max(p.maxBeatGap, now.Sub(p.lastBeat))
	}
	p.lastBeat = now
	p.mu.Unlock()
	s.beats.add(store.Beat{Worker: p.id, Running: hb.Running, Queued: hb.Queued, Load: hb.Load})
	s.metrics.heartbeats.WithLabelValues(via).Inc()
	return nil
}

// computing returns the units of job executing on live workers, as of
// their last heartbeats.
func (s *Server) computing(job uint64) int {
	s.mu.Lock()
	peers := make([]*peer, 0, len(s.peers))
	for _, p := range s.peers {
		peers = append(peers, p)
	}
	s.mu.Unlock()
	n := 0
	for _, p := range peers {
		p.mu.Lock()
		if !p.dead {
			n += p.computing[job]
		}
		p.mu.Unlock()
	}
	return n
}

// deregister forgets a worker; its units run elsewhere.
func (s *Server) deregister(ctx context.Context, id string) error {
	s.mu.Lock()
	p := s.peers[id]
	s.mu.Unlock()
	if p != nil {
		s.drop(p, nil)
	}
	if err := s.db.DeleteWorker(ctx, id); errors.Is(err, store.ErrNotFound) {
		return kindf(errNotFound, "no worker %s on this server", id)
	} else if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.gone, id)
	s.mu.Unlock()
	s.log.Info("worker deregistered", "worker", id)
	return nil
}

// refresh asks a live worker for its current figures over the data plane
// and records them as if it had sent them itself.
func (s *Server) refresh(ctx context.Context, id string) error {
	s.mu.Lock()
	p := s.peers[id]
	s.mu.Unlock()
	if p == nil {
		if _, err := s.db.Worker(ctx, id); err != nil {
			return kindf(errNotFound, "no worker %s on this server", id)
		}
		return kindf(errConflict, "worker %s is not live; it cannot be asked for fresh figures", id)
	}
	reg, err := p.figures(ctx)
	if err != nil {
		return err
	}
	_, err = s.register(ctx, id, reg, principal{}, "") // figures the server itself asked for
	return err
}

// workerInfo is the API view of a worker record.
func (s *Server) workerInfo(w store.Worker) api.WorkerInfo {
	s.mu.Lock()
	p, alive := s.peers[w.ID]
	d := s.gone[w.ID]
	s.mu.Unlock()
	var paths []api.PathInfo
	use := d.usage
	var maxUnitMem int64 // what the live worker registered
	var beatGap time.Duration
	if !alive {
		// Its units were taken back when it died: the last heartbeat's
		// counts are no longer on it.
		w.Running, w.Queued = 0, 0
	} else {
		use = p.busy.totals()
		p.mu.Lock()
		maxUnitMem, beatGap = p.reg.MaxUnitMem, p.maxBeatGap
		p.mu.Unlock()
		for _, ps := range p.sess.Stats() {
			paths = append(paths, api.PathInfo{Local: ps.Local, Remote: ps.Remote, State: ps.State,
				BytesSent: ps.BytesSent, BytesReceived: ps.BytesReceived, RateBps: ps.RateBps, RTTNanos: ps.RTT.Nanoseconds(), MaxGapNanos: ps.MaxGap.Nanoseconds()})
		}
	}
	return api.WorkerInfo{
		ID: w.ID,
		Register: api.Register{Name: w.Name, Addresses: w.Addresses, Cores: w.Cores, Memory: w.Memory, Disk: w.Disk,
			CPUMHz: w.CPUMHz, Threads: w.Threads, Ops: w.Ops, MaxUnitMem: maxUnitMem},
		Registered:      w.Registered,
		LastSeen:        w.LastSeen,
		Alive:           alive,
		Died:            d.at,
		DiedOf:          d.cause,
		Running:         w.Running,
		Queued:          w.Queued,
		Load:            w.Load,
		Done:            w.Done,
		Paths:           paths,
		MaxBeatGapNanos: beatGap.Nanoseconds(),

		Tries:        use.tries,
		ComputeNanos: use.compute.Nanoseconds(),
		LentNanos:    use.lent.Nanoseconds(),
	}
}

// replaceDead forgets the dead workers that registered the name and
// addresses of worker id, which has just registered anew: the same
// worker, restarted (a new process gets a new ID). On a database shared
// with other servers a worker not live here may be live on another: it
// must also have been silent past the worker timeout.
func (s *Server) replaceDead(ctx context.Context, id string, reg api.Register) {
	if reg.Name == "" {
		return
	}
	recs, err := s.db.Workers(ctx)
	if err != nil {
		s.log.Warn("listing workers to replace a dead one failed", "worker", id, "err", err)
		return
	}
	_, timeout := s.beatTimes()
	for _, w := range recs {
		if w.ID == id || w.Name != reg.Name || !slices.Equal(w.Addresses, reg.Addresses) || s.live(w.ID) ||
			s.shared && time.Since(w.LastSeen) < timeout {
			continue
		}
		s.forget(ctx, w.ID, "replaced by worker "+id+" of the same name and addresses")
	}
}

// forgetDead forgets the workers that are not live here and were last
// seen more than Config.ForgetWorkers ago.
func (s *Server) forgetDead(ctx context.Context) {
	recs, err := s.db.Workers(ctx)
	if err != nil {
		s.log.Warn("listing workers to forget the dead ones failed", "err", err)
		return
	}
	for _, w := range recs {
		if !s.live(w.ID) && time.Since(w.LastSeen) > s.cfg.ForgetWorkers {
			s.forget(ctx, w.ID, fmt.Sprintf("dead and not seen for %v", s.cfg.ForgetWorkers))
		}
	}
}

// live reports whether worker id is live on this server.
func (s *Server) live(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peers[id] != nil
}

// forget removes the record of dead worker id.
func (s *Server) forget(ctx context.Context, id, why string) {
	if err := s.db.DeleteWorker(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("forgetting a dead worker failed", "worker", id, "err", err)
		return
	}
	s.mu.Lock()
	delete(s.gone, id)
	s.mu.Unlock()
	s.owners.forget(id)
	s.log.Info("dead worker forgotten", "worker", id, "why", why)
}

// reap declares workers dead that were silent past the timeout, and
// forgets those dead for Config.ForgetWorkers (at most once a minute).
func (s *Server) reap() {
	t := time.NewTicker(max(s.cfg.WorkerTimeout/4, 10*time.Millisecond))
	defer t.Stop()
	// The first sweep waits a round: workers re-register after a restart
	// (which renews their LastSeen) before their records are judged.
	swept := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if s.cfg.ForgetWorkers > 0 && time.Since(swept) > min(s.cfg.ForgetWorkers/4, time.Minute) {
			swept = time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			s.forgetDead(ctx)
			cancel()
		}
		_, timeout := s.beatTimes()
		s.mu.Lock()
		var silent []*peer
		for _, p := range s.peers {
			if p.silence() > timeout {
				silent = append(silent, p)
			}
		}
		s.mu.Unlock()
		for _, p := range silent {
			s.drop(p, fmt.Errorf("no heartbeat for %v", p.silence().Round(time.Millisecond)))
		}
	}
}
