package server

import (
	"context"

	"github.com/braid-hpc/braid/store"
	"github.com/braid-hpc/braid/transport"
)

// InjectFaults makes a server built from cfg write unit results and the
// ends of jobs through state, and store unit results through results:
// the tests' seam for a full disk. Either may be nil.
func InjectFaults(cfg *Config, state func(store.Jobs) store.Jobs, results func(store.Blobs) store.Blobs) {
	cfg.wrapState, cfg.wrapResults = state, results
}

// Route is one entry of the route table, for the role matrix test.
type Route struct {
	Pattern, Method string
	// Roles may call the route; nil means it is open.
	Roles []string
}

// Routes returns the route table of s.
func Routes(s *Server) []Route {
	var out []Route
	for _, rt := range s.routes() {
		out = append(out, Route{Pattern: rt.pattern, Method: rt.method, Roles: rt.roles.names()})
	}
	return out
}

// PauseAfterCount makes a server built from cfg call fn each time the
// scheduler counted a unit's result, before the result is recorded.
func PauseAfterCount(cfg *Config, fn func(job, unit uint64)) { cfg.counted = fn }

// AfterStep makes a server built from cfg call fn each time it stored a
// step of a pipeline, before it stores the next.
func AfterStep(cfg *Config, fn func(step string, job uint64)) { cfg.stepStored = fn }

// PeerSession returns the data-plane session of live worker id, or nil. A
// worker that re-registers after it was declared dead gets a new session,
// whose path statistics start from zero.
func PeerSession(s *Server, id string) *transport.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.peers[id]; p != nil {
		return p.sess
	}
	return nil
}

// Backfilled returns a channel closed when s indexed the members of the
// datasets made before the index, or stopped.
func Backfilled(s *Server) <-chan struct{} { return s.backfilled }

// DatasetCreator returns who the store's index says made dataset id.
func DatasetCreator(s *Server, id string) (string, error) {
	return s.db.DatasetCreator(context.Background(), id)
}
