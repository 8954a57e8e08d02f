package server

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/store"
)

// Owners and sharing. Every job, pipeline, upload and operation version
// records its owner (store/owners.go): the group of the token that made
// it as "group:NAME" if the token has one, else the token's ID. A
// client sees, reads, deletes and uses as input only what its owner
// made: tokens of one group (braid token create --group NAME) share
// everything, as the members of one tenant of Dask Gateway or Ray do; a
// token without a group shares nothing. Admins (the cluster key, admin
// tokens) and monitors (which only look) see everything; the cluster
// key's own records, and those of a database from before owners, have
// no owner, so only they see them. Something another owner made is
// answered as if it did not exist (404), so that IDs reveal nothing.
//
// Operation names are global: every client runs any operation, but only
// the owner of an operation's newest version (or an admin) may add a
// version or remove it. Workers read only modules (getBlob) and get
// their units' data over the data plane, so owners do not concern them.

// owner is what p's records are owned by.
func (p principal) owner() string {
	if p.group != "" {
		return "group:" + p.group
	}
	return p.tokenID
}

// seesAll reports whether p sees every owner's records: admins, and
// monitors, which only look.
func (p principal) seesAll() bool { return p.role == api.RoleAdmin || p.role == api.RoleMonitor }

// sees reports whether p may see a record of owner. A record without an
// owner is an admin's.
func (p principal) sees(owner string) bool {
	return p.seesAll() || owner != "" && owner == p.owner()
}

// visibleJob returns job id if p may see it, and the 404 of a job that
// does not exist otherwise.
func (s *Server) visibleJob(ctx context.Context, p principal, id uint64) (store.Job, error) {
	j, err := s.db.Job(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && !p.sees(j.Owner) {
		return store.Job{}, kindf(errNotFound, "no job %d on this server", id)
	}
	return j, err
}

// blobVisible reports whether p may read blob id: p's owner uploaded it
// or owns a job whose input or output it is, or it is the module of an
// operation (operations are everyone's).
func (s *Server) blobVisible(ctx context.Context, p principal, id string) (bool, error) {
	if p.seesAll() {
		return true, nil
	}
	if p.owner() != "" {
		if ok, err := s.db.BlobVisible(ctx, id, p.owner()); ok || err != nil {
			return ok, err
		}
	}
	return s.db.IsModule(ctx, id)
}

// memberVisible reports whether blob id is a member of dataset, which p
// may read and which the server made one (its index lists the members:
// isDataset): the members of a dataset are readable with it, whoever
// stored them (a job's output dataset holds that job's results).
func (s *Server) memberVisible(ctx context.Context, p principal, dataset, id string) (bool, error) {
	if dataset == "" || !store.ValidID(dataset) {
		return false, nil
	}
	if ok, err := s.blobVisible(ctx, p, dataset); err != nil || !ok {
		return false, err
	}
	members, _, err := s.membersOf(ctx, dataset)
	if err != nil {
		return false, err
	}
	return slices.Contains(members, id), nil
}

// ownerPrincipal is a client whose records are owner's, as blobVisible
// asks about them.
func ownerPrincipal(owner string) principal {
	if g, ok := strings.CutPrefix(owner, "group:"); ok {
		return principal{group: g}
	}
	return principal{tokenID: owner}
}

// othersNeed reports whether, for a caller p that does not see
// everything, blob is needed by an owner other than p's: one of
// uploaders, or one of jobs (its unfinished users and kept outputs)
// that p cannot see. Deleting it then only takes p's upload away.
func (s *Server) othersNeed(ctx context.Context, p principal, uploaders []string, jobs []uint64) (bool, error) {
	if p.seesAll() {
		return false, nil
	}
	for _, o := range uploaders {
		if o != p.owner() {
			return true, nil
		}
	}
	for _, id := range jobs {
		j, err := s.db.Job(ctx, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return false, err
		}
		if err == nil && !p.sees(j.Owner) {
			return true, nil
		}
	}
	return false, nil
}
