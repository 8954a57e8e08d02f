package server

import "github.com/braid-hpc/braid/store"

// InjectFaults makes a server built from cfg write unit results and the
// ends of jobs through state, and store unit results through results:
// the tests' seam for a full disk. Either may be nil.
func InjectFaults(cfg *Config, state func(store.Jobs) store.Jobs, results func(store.Blobs) store.Blobs) {
	cfg.wrapState, cfg.wrapResults = state, results
}
