package server

import (
	"context"
	"errors"
	"time"

	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/store"
)

// Datasets made before the store's index of members have no rows in it,
// so nothing keeps their members but the jobs that read them (datasets.go
// in store). The migration that follows the index lists every blob that
// may be one (store.Meta.UnindexedDatasets); from its start, the server
// reads each one's manifest, from the local disk or S3 as any blob, and
// records its members (store.Meta.IndexDataset), backfillBatch blobs a
// pass, logging its progress. Each blob leaves the list as it is done,
// so a restart resumes where the last run stopped. A blob that is no
// dataset leaves it without members; so do a missing blob and a corrupt
// or invalid manifest, which are logged. A blob that failed to read for
// another reason (the object store did not answer) stays for the next
// round, backfillRetry later.
//
// With several servers over one database, one at a time does the work:
// the holder of the lease backfillLease, taken again at every pass; the
// others try every backfillLeaseTTL/2 and find nothing left once it is
// done, or take over if it stopped.
//
// Until a dataset is indexed, its members are kept only as they were
// before the index: a member may be deleted alone, or by the cleanup of
// an unrelated job with the same bytes.

const (
	backfillBatch    = 100
	backfillLease    = "datasets/backfill"
	backfillLeaseTTL = time.Minute
	backfillRetry    = time.Minute
)

// backfill indexes the members of datasets made before the index, until
// none is left or the server stops; it closes s.backfilled when done.
func (s *Server) backfill() {
	defer close(s.backfilled)
	var (
		after            string // the last blob of the round so far
		failed           bool   // a blob of this round stays for the next
		checked, indexed int
		wait             time.Duration
	)
	for {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-s.stop:
				t.Stop()
				return
			case <-t.C:
			}
		}
		wait = 0
		ctx, cancel := s.lifetime()
		ctx, cancel2 := context.WithTimeout(ctx, backfillLeaseTTL/2)
		ids, err := s.backfillPass(ctx, after)
		cancel2()
		cancel()
		select {
		case <-s.stop:
			return
		default:
		}
		switch {
		case errors.Is(err, errNotHolder):
			wait = backfillLeaseTTL / 2
			continue
		case err != nil:
			s.log.Warn("indexing the members of datasets made before the index failed; trying again", "err", err)
			wait = backfillRetry
			continue
		}
		if len(ids) == 0 {
			if after == "" {
				if checked > 0 {
					s.log.Info("indexed the members of the datasets made before the index", "blobs", checked, "datasets", indexed)
				}
				return
			}
			// A round ended; the next one finds only what failed in it.
			after = ""
			if failed {
				wait = backfillRetry
			}
			failed = false
			continue
		}
		n := 0
		for _, r := range ids {
			if r.err != nil {
				failed = true
			} else if r.dataset {
				n++
			}
		}
		after = ids[len(ids)-1].id
		checked += len(ids)
		indexed += n
		s.log.Info("indexing the members of datasets made before the index", "blobs", checked, "datasets", indexed)
	}
}

// errNotHolder is backfillPass's answer when another server holds the
// lease.
var errNotHolder = errors.New("another server indexes the datasets")

// backfilled is what became of one blob of a pass.
type backfilled struct {
	id      string
	dataset bool  // it is a dataset, now indexed
	err     error // it stays listed
}

// backfillPass indexes up to backfillBatch blobs listed after after.
func (s *Server) backfillPass(ctx context.Context, after string) ([]backfilled, error) {
	if !s.singleton(ctx, backfillLease, backfillLeaseTTL) {
		return nil, errNotHolder
	}
	ids, err := s.db.UnindexedDatasets(ctx, after, backfillBatch)
	if err != nil {
		return nil, err
	}
	out := make([]backfilled, len(ids))
	for i, id := range ids {
		out[i] = backfilled{id: id}
		if ctx.Err() != nil {
			out[i].err = ctx.Err()
			continue
		}
		members, err := s.backfillOne(ctx, id, 0)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("indexing a blob that may be a dataset failed; trying again later", "blob", id, "err", err)
		}
		out[i].dataset, out[i].err = members != nil, err
	}
	return out, nil
}

// backfillInputDepth bounds how deep backfillOne indexes the input of a
// job whose output it indexes, the input of that input's job, and so on.
const backfillInputDepth = 8

// backfillOne indexes blob id (backfillMembers) and returns its members,
// nil if it is no dataset.
func (s *Server) backfillOne(ctx context.Context, id string, depth int) ([]string, error) {
	members, creator, err := s.backfillMembers(ctx, id, depth)
	if err == nil {
		err = s.db.IndexDataset(ctx, id, creator, members)
	}
	return members, err
}

// backfillMembers returns the members of blob id from its manifest, and
// who made it: nil if it is no dataset, is missing, or its manifest is
// corrupt or invalid (those are logged); an error if it could not be read
// and may be later.
//
// Before the index, a blob was a dataset because its bytes were a
// manifest, so a client could upload one that names another owner's
// blobs, or have a job write one (blobs are content-addressed). A
// manifest is indexed, with its creator, if
//   - an uploader of it may read every member (mayList): that uploader;
//   - it is the unexpired output of a job with merge none whose input is
//     a dataset (indexed first if it was not yet, at most
//     backfillInputDepth inputs deep) that the job's owner may read: the
//     server assembled it from the job's results (assembleDataset), and
//     that owner;
//   - or it is the unexpired output of a job whose owner may read every
//     member: that owner.
//
// An upload or a job without an owner is an admin's (or from before
// owners), which may read all. A blob that is only an unfinished job's
// input is not indexed.
func (s *Server) backfillMembers(ctx context.Context, id string, depth int) ([]string, string, error) {
	d, err := s.readManifest(ctx, id)
	switch {
	case err == nil:
	case errors.Is(err, errBadRequest):
		return nil, "", nil // no manifest: a blob as any other
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrCorrupt):
		s.log.Warn("a blob listed as kept (an upload, an output or an unfinished job's input) is missing or corrupt; "+
			"if it was a dataset, its members are not indexed", "blob", id, "err", err)
		return nil, "", nil
	default:
		return nil, "", err
	}
	members := memberBlobs(d)
	uploaders, err := s.db.Uploaders(ctx, id)
	if err != nil {
		return nil, "", err
	}
	for _, o := range uploaders {
		if ok, err := s.mayList(ctx, o, members); err != nil || ok {
			return members, o, err
		}
	}
	jobs, err := s.db.OutputJobs(ctx, id)
	if err != nil {
		return nil, "", err
	}
	for _, jid := range jobs {
		j, err := s.db.Job(ctx, jid)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		if ok, err := s.assembled(ctx, j, depth); err != nil || ok {
			return members, j.Owner, err
		}
		if ok, err := s.mayList(ctx, j.Owner, members); err != nil || ok {
			return members, j.Owner, err
		}
	}
	s.log.Warn("a blob that looks like a manifest is not made a dataset: none of its uploaders, nor the owners of the jobs "+
		"whose output it is, may read all its members, and no job assembled it", "blob", id, "uploaders", len(uploaders), "jobs", len(jobs))
	return nil, "", nil
}

// assembled reports whether the server assembled job j's output as a
// dataset (assembleDataset with merge none): j's input is a dataset that
// j's owner may read, indexed first if the backfill had not yet.
func (s *Server) assembled(ctx context.Context, j store.Job, depth int) (bool, error) {
	if j.Spec.Merge != ops.MergeNone || j.Input == "" {
		return false, nil
	}
	members, ok, err := s.membersOf(ctx, j.Input)
	if err != nil {
		return false, err
	}
	if !ok {
		if depth >= backfillInputDepth {
			return false, nil
		}
		if members, err = s.backfillOne(ctx, j.Input, depth+1); err != nil || members == nil {
			return false, err
		}
	}
	if j.Owner == "" {
		return true, nil
	}
	return s.blobVisible(ctx, ownerPrincipal(j.Owner), j.Input)
}

// mayList reports whether owner may read every blob of members, as a
// dataset's maker must (makeDataset); owner "" is an admin's.
func (s *Server) mayList(ctx context.Context, owner string, members []string) (bool, error) {
	if owner == "" {
		return true, nil
	}
	p := ownerPrincipal(owner)
	for _, m := range members {
		if ok, err := s.blobVisible(ctx, p, m); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}
