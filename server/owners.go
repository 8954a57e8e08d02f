package server

import (
	"sync"

	"github.com/braid-hpc/braid/api"
)

// owners binds each worker ID to the worker token that registered it, so
// that one worker's token cannot update, heartbeat or deregister another
// worker. Admins (the cluster key, admin tokens) act on any worker.
//
// The binding lives in memory: after a server restart the first worker
// token that speaks for a worker ID takes it again (the worker that held it
// re-registers within a heartbeat, before anyone else is likely to).
type owners struct {
	mu sync.Mutex
	by map[string]string // worker ID -> token ID
}

// claim records p's token as the owner of worker id, if p is a worker
// token.
func (o *owners) claim(id string, p principal) {
	if p.role != api.RoleWorker || p.tokenID == "" || id == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.by == nil {
		o.by = make(map[string]string)
	}
	o.by[id] = p.tokenID
}

// check refuses a worker token that is not the one worker id registered
// with.
func (o *owners) check(id string, p principal) error {
	if p.role != api.RoleWorker {
		return nil
	}
	o.mu.Lock()
	owner, ok := o.by[id]
	o.mu.Unlock()
	if ok && owner != p.tokenID {
		return kindf(errForbidden, "worker %s registered with another token (%s); a worker token speaks only for the workers it registered", id, owner)
	}
	return nil
}

func (o *owners) forget(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.by, id)
}
