package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/lifecycle"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/store"
)

// Datasets. A dataset is a blob, its manifest (api.Dataset: JSON, members
// sorted by name, each a name, a size and a blob ID), so that storing,
// fetching, checking and removing it are a blob's. A blob is a dataset
// when the server made it one (isDataset): never because its bytes look
// like a manifest.
//
// A job whose input is a dataset maps its operation over every member:
// each member is split as the job's split cuts one input (whole when it
// names none), its units read the member's blob, and they come member by
// member in name order. The merge concat joins all the units' results in
// that order; reduce:OP reduces them all in one tree (ops.ReduceFanIn);
// none joins each member's results apart, into a new blob each, and the
// output is a new dataset of the same names. A module's unit finds its
// member's bytes as /in/NAME too.
//
// The store keeps an index of every dataset's members (store.Meta's
// AddDataset), written with the manifest: by POST /v1/datasets before
// the upload is recorded, and by a job's assembly before its output is.
// A member is kept while a dataset that lists it lives (an upload, a
// kept output, an unfinished job's input: store.Meta.BlobKept), so an
// unrelated job whose intermediate results have a member's very bytes
// (blobs are content-addressed) leaves it, and deleting it alone is
// refused (409). Until the job that assembles an output dataset is
// recorded done, its new members are pinned (run.pinned).
//
// While a job runs, its input's members are kept as the blobs of its
// units are; when it ends they stay (dropIntermediates keeps a dataset
// input's blobs, and its own output's members, where a result has the
// same bytes). An output dataset's members go with its manifest when the
// output expires (expire), unless another dataset lists them. Deleting a
// dataset deletes its members too (deleteDatasetMembers), but those that
// something else needs.

// memberBlobs returns the blobs of d's members, each once.
func memberBlobs(d api.Dataset) []string {
	ids := make([]string, 0, len(d.Members))
	seen := make(map[string]bool, len(d.Members))
	for _, m := range d.Members {
		if !seen[m.Blob] {
			seen[m.Blob] = true
			ids = append(ids, m.Blob)
		}
	}
	return ids
}

// membersOf returns the blobs of the members of dataset id, each once,
// from the store's index; isDataset is false if id is no dataset.
func (s *Server) membersOf(ctx context.Context, id string) (members []string, isDataset bool, err error) {
	members, err = s.db.DatasetMembers(ctx, id)
	if err != nil {
		return nil, false, err
	}
	return members, len(members) > 0, nil
}

// deleteDatasetMembers deletes the members of dataset, deleted, or whose
// upload by owners was: each member's uploads by owners as a member
// (api.QueryMember; store.Meta.AddMemberUpload) go, then each member
// that nothing else needs (an upload on its own, by these owners too,
// another owner's upload, another dataset, a kept output, an operation:
// store.Meta.KeptBlobs). A member that an unfinished job uses keeps its
// uploads and stays as it was. The store is asked about all the members
// at once (store.Meta.BusyBlobs, RemoveMemberUploads), then dropBlobs
// removes them dropBatchSize at a time. The work goes on if the client
// goes away.
func (s *Server) deleteDatasetMembers(dataset string, members, owners []string) error {
	ctx, cancel := s.lifetime()
	defer cancel()
	busy, err := s.db.BusyBlobs(ctx, members)
	if err != nil {
		return fmt.Errorf("dataset %s is deleted, but finding which of its members unfinished jobs use failed: %w; delete the members left one by one", dataset, err)
	}
	drop := make([]string, 0, len(members))
	for _, m := range members {
		if busy[m] == "" {
			drop = append(drop, m)
		}
	}
	if err := s.db.RemoveMemberUploads(ctx, drop, owners); err != nil {
		return fmt.Errorf("dataset %s is deleted, but deleting the uploads of its members failed: %w; delete the members left one by one", dataset, err)
	}
	n, bytes := s.dropBlobs(ctx, 0, drop, nil, nil)
	s.log.Info("dataset deleted", "blob", dataset, "members", len(members), "removed", n, "bytes", bytes)
	return nil
}

// maxManifest bounds a manifest, and the body of a dataset request: some
// 400 bytes for each of api.MaxMembers.
const maxManifest = api.MaxMembers * 400

// isDataset reports whether blob id is a dataset: one that the server
// made (makeDataset, a job's assembly, the backfill of a manifest whose
// owner may read every member), so that the store's index lists its
// members. Bytes that begin as a manifest do not make a blob one: any
// client may upload any bytes (braid put), and a forged manifest would
// otherwise name another owner's blobs as its members.
func (s *Server) isDataset(ctx context.Context, id string) (bool, error) {
	_, ok, err := s.membersOf(ctx, id)
	return ok, err
}

// dataset reads and checks the manifest of dataset id; ok is false if
// the blob is no dataset (isDataset). The manifest gives its members'
// names and sizes; which blobs they are is the index's, and a manifest
// that lists others is corrupt.
func (s *Server) dataset(ctx context.Context, id string) (d api.Dataset, ok bool, err error) {
	members, ok, err := s.membersOf(ctx, id)
	if err != nil || !ok {
		return d, false, err
	}
	d, err = s.readManifest(ctx, id)
	if err != nil {
		return d, true, err
	}
	listed := memberBlobs(d)
	slices.Sort(listed)
	if !slices.Equal(listed, members) {
		return d, true, fmt.Errorf("dataset %s: its manifest lists %d blobs, not the %d of the store's index: %w", id, len(listed), len(members), store.ErrCorrupt)
	}
	return d, true, nil
}

// readManifest reads and checks blob id as a manifest, whoever made it;
// a blob that is too large or does not begin as a manifest is an
// errBadRequest, found without reading it all.
func (s *Server) readManifest(ctx context.Context, id string) (d api.Dataset, err error) {
	f, size, err := s.blobs.Open(id)
	if err != nil {
		return d, fmt.Errorf("dataset %s: %w", id, err)
	}
	defer f.Close()
	if size > maxManifest {
		return d, kindf(errBadRequest, "dataset %s: a manifest of %d bytes is larger than the limit of %d", id, size, maxManifest)
	}
	magic := make([]byte, len(api.DatasetMagic))
	if _, err := f.ReadAt(magic, 0); err != nil && !errors.Is(err, io.EOF) {
		return d, fmt.Errorf("read blob %s: %w", id, err)
	} else if err != nil || string(magic) != api.DatasetMagic {
		return d, kindf(errBadRequest, "dataset %s: its bytes are no manifest", id)
	}
	if err := s.blobs.Verify(ctx, id); err != nil {
		return d, fmt.Errorf("dataset %s: its manifest: %w", id, err)
	}
	dec := json.NewDecoder(io.NewSectionReader(f, 0, size))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, kindf(errBadRequest, "dataset %s: its manifest does not decode: %v", id, err)
	}
	if err := d.Check(); err != nil {
		return d, kindf(errBadRequest, "dataset %s: its manifest is invalid: %v", id, err)
	}
	return d, nil
}

// makeDataset stores the manifest of members, which must be blobs of
// this server and no datasets, as an upload.
func (s *Server) makeDataset(ctx context.Context, p principal, members []api.DatasetMember) (api.DatasetInfo, error) {
	d := api.Dataset{Format: api.DatasetFormat, Members: slices.Clone(members)}
	slices.SortFunc(d.Members, func(a, b api.DatasetMember) int { return strings.Compare(a.Name, b.Name) })
	if err := d.Check(); err != nil {
		return api.DatasetInfo{}, kindf(errBadRequest, "%v", err)
	}
	var total int64
	for _, m := range d.Members {
		info, err := s.blobs.Stat(m.Blob)
		if err == nil {
			var ok bool
			if ok, err = s.blobVisible(ctx, p, m.Blob); err == nil && !ok {
				err = store.ErrNotFound // another owner's: as if it did not exist
			}
		}
		if errors.Is(err, store.ErrNotFound) {
			return api.DatasetInfo{}, kindf(errNotFound, "dataset: member %q: no blob %s on this server; upload it first (braid put)", m.Name, m.Blob)
		}
		if err != nil {
			return api.DatasetInfo{}, err
		}
		if info.Size != m.Size {
			return api.DatasetInfo{}, kindf(errBadRequest, "dataset: member %q: blob %s has %d bytes, not %d", m.Name, m.Blob, info.Size, m.Size)
		}
		if ok, err := s.isDataset(ctx, m.Blob); err != nil {
			return api.DatasetInfo{}, err
		} else if ok {
			return api.DatasetInfo{}, kindf(errBadRequest, "dataset: member %q: blob %s is a dataset; datasets do not nest", m.Name, m.Blob)
		}
		total += m.Size
	}
	id, err := s.putManifest(ctx, d, p.owner(), true)
	if err != nil {
		return api.DatasetInfo{}, err
	}
	return api.DatasetInfo{ID: id, Members: len(d.Members), Size: total}, nil
}

// claimManifest refuses blob id as p's upload or p's job's output (what)
// if it is a dataset's manifest, unless p may read it already or may
// read all its members. Blobs are content-addressed: whoever uploads, or
// makes a job write, a dataset's very bytes would otherwise own the
// dataset, and so read its members, another owner's blobs
// (memberVisible).
func (s *Server) claimManifest(ctx context.Context, p principal, id, what string) error {
	if p.seesAll() {
		return nil
	}
	members, ok, err := s.membersOf(ctx, id)
	if err != nil || !ok {
		return err
	}
	if ok, err := s.blobVisible(ctx, p, id); err != nil || ok {
		return err
	}
	if ok, err := s.mayList(ctx, p.owner(), members); err != nil {
		return err
	} else if !ok || p.owner() == "" {
		return kindf(errNotFound, "%s: these bytes are the manifest of a dataset with a member that is no blob on this server; make datasets of your own blobs (braid put DIR)", what)
	}
	return nil
}

// putManifest stores d's manifest, made by owner, and returns its ID; as
// an upload (kept until deleted) if upload.
func (s *Server) putManifest(ctx context.Context, d api.Dataset, owner string, upload bool) (string, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return "", err
	}
	if !bytes.HasPrefix(b, []byte(api.DatasetMagic)) {
		return "", fmt.Errorf("dataset: the manifest does not begin with %s", api.DatasetMagic)
	}
	if err := s.room("dataset", int64(len(b))); err != nil {
		return "", err
	}
	st, err := s.blobs.Stage(ctx, bytes.NewReader(b))
	if err != nil {
		return "", storageError("dataset", err)
	}
	defer st.Discard()
	s.pin(st.ID)
	defer s.unpin(st.ID)
	if err := st.Commit(ctx); err != nil {
		return "", storageError("dataset", err)
	}
	if err := s.db.AddDataset(ctx, st.ID, owner, memberBlobs(d)); err != nil {
		return "", storageError("dataset: record its members", err)
	}
	if upload {
		if err := s.db.AddUpload(ctx, st.ID, owner); err != nil {
			return "", storageError("dataset: record it", err)
		}
	}
	return st.ID, nil
}

func (s *Server) postDataset(w http.ResponseWriter, r *http.Request) error {
	var req api.DatasetRequest
	if err := s.readJSONMax(w, r, "dataset", &req, maxManifest); err != nil {
		return err
	}
	info, err := s.makeDataset(r.Context(), caller(r), req.Members)
	if err != nil {
		return err
	}
	s.log.Info("dataset stored", "blob", info.ID, "members", info.Members, "bytes", info.Size)
	w.Header().Set("Location", api.PathDatasets+"/"+info.ID)
	return writeJSON(w, http.StatusCreated, &info)
}

func (s *Server) getDataset(w http.ResponseWriter, r *http.Request) error {
	id, err := blobID(r)
	if err != nil {
		return err
	}
	if p := caller(r); p.role != api.RoleWorker {
		if ok, err := s.blobVisible(r.Context(), p, id); err != nil {
			return err
		} else if !ok {
			return kindf(errNotFound, "no dataset %s on this server", id)
		}
	}
	d, ok, err := s.dataset(r.Context(), id)
	switch {
	case err != nil:
		return err
	case ok:
		return writeJSON(w, http.StatusOK, &d)
	}
	if _, err := s.blobs.Stat(id); errors.Is(err, store.ErrNotFound) {
		if gone := s.expiredOutput(r.Context(), id); gone != nil {
			return gone
		}
		return kindf(errNotFound, "no dataset %s on this server", id)
	}
	return kindf(errBadRequest, "blob %s is not a dataset (braid get fetches it as a file)", id)
}

// datasetMembers opens, one after the other, the members of d for
// ops.SplitEach, each checked against its sha256 and its size in the
// manifest first. Close the last one with close.
type datasetMembers struct {
	s    *Server
	ctx  context.Context
	d    api.Dataset
	open store.Reader
}

func (dm *datasetMembers) member(i int) (io.ReaderAt, int64, error) {
	dm.close()
	m := dm.d.Members[i]
	if err := dm.s.blobs.Verify(dm.ctx, m.Blob); errors.Is(err, store.ErrNotFound) {
		return nil, 0, kindf(errNotFound, "dataset member %q: its blob %s is missing on this server; upload it again and make the dataset anew", m.Name, m.Blob)
	} else if err != nil {
		return nil, 0, fmt.Errorf("dataset member %q: %w", m.Name, err)
	}
	f, size, err := dm.s.blobs.Open(m.Blob)
	if err != nil {
		return nil, 0, fmt.Errorf("dataset member %q: %w", m.Name, err)
	}
	dm.open = f
	if size != m.Size {
		return nil, 0, kindf(errBadRequest, "dataset member %q: blob %s has %d bytes, the manifest says %d", m.Name, m.Blob, size, m.Size)
	}
	return f, size, nil
}

func (dm *datasetMembers) close() {
	if dm.open != nil {
		dm.open.Close()
		dm.open = nil
	}
}

// splitDataset splits a job over dataset d: see the top of this file.
func (s *Server) splitDataset(ctx context.Context, rec store.Job, jo jobOps, d api.Dataset) ([]store.Unit, error) {
	dm := &datasetMembers{s: s, ctx: ctx, d: d}
	defer dm.close()
	hint := ops.Hint{Units: rec.Units, TileW: rec.TileW, TileH: rec.TileH, Repeat: rec.Repeat}
	specs, err := ops.SplitEach(jo.main.op, jo.split, jo.merge, jo.reduce.op, len(d.Members), dm.member, rec.Params, hint)
	if err != nil {
		var ke *kindError
		if errors.As(err, &ke) {
			return nil, err
		}
		return nil, opsError("job request", err)
	}
	units := make([]store.Unit, len(specs))
	for i, sp := range specs {
		u := store.Unit{ID: uint64(i), Params: sp.Params, Reduce: sp.Reduce}
		for _, d := range sp.Deps {
			u.Deps = append(u.Deps, uint64(d))
		}
		if sp.Member >= 0 {
			m := d.Members[sp.Member]
			u.Blob, u.Off, u.Len = m.Blob, sp.Off, sp.Len
			if jo.main.module != "" {
				u.Params = withParam(sp.Params, api.ParamFiles, api.EncodeFiles([]api.FilePart{{Name: m.Name, Len: sp.Len}}))
			}
		}
		units[i] = u
	}
	return units, nil
}

// memberGroups returns, for each member of d, the indexes of the units
// that map it, from the units as splitDataset made them: member by
// member, each unit reading its member's blob. Members with the same
// bytes (one blob) split alike, so a run of units of one blob is shared
// evenly among the run of members it holds.
func memberGroups(d api.Dataset, units []store.Unit) ([][]int, error) {
	groups := make([][]int, len(d.Members))
	u := 0
	for m := 0; m < len(d.Members); {
		blob := d.Members[m].Blob
		k := m
		for k < len(d.Members) && d.Members[k].Blob == blob {
			k++
		}
		start := u
		for u < len(units) && !units[u].Reduce && units[u].Blob == blob {
			u++
		}
		n, same := u-start, k-m
		if n == 0 || n%same != 0 {
			return nil, fmt.Errorf("the units do not match the dataset's members at member %q", d.Members[m].Name)
		}
		for i := range same {
			for x := start + i*n/same; x < start+(i+1)*n/same; x++ {
				groups[m+i] = append(groups[m+i], x)
			}
		}
		m = k
	}
	return groups, nil
}

// assembleDataset assembles the output of a job over dataset d.
func (s *Server) assembleDataset(ctx context.Context, j *lifecycle.Job, d api.Dataset) (string, int64, error) {
	r := runOf(j)
	rr := &runResults{s: s, ids: j.ResultIDs()}
	switch r.ops.merge.Kind {
	case ops.MergeReduce:
		return s.putResults(ctx, rr, []int{rr.Len() - 1}, nil)
	case ops.MergeNone:
	default:
		all := make([]int, rr.Len())
		for i := range all {
			all[i] = i
		}
		return s.putResults(ctx, rr, all, nil)
	}
	groups, err := memberGroups(d, j.Units)
	if err != nil {
		return "", 0, err
	}
	out := api.Dataset{Format: api.DatasetFormat, Members: make([]api.DatasetMember, len(d.Members))}
	var total int64
	for i, g := range groups {
		id, size, err := s.putResults(ctx, rr, g, r)
		if err != nil {
			return "", 0, fmt.Errorf("member %q: %w", d.Members[i].Name, err)
		}
		out.Members[i] = api.DatasetMember{Name: d.Members[i].Name, Size: size, Blob: id}
		total += size
	}
	id, err := s.putManifest(ctx, out, j.Rec.Owner, false)
	return id, total, err
}

// putResults stores the results idx of rr, joined in order, as a blob;
// pinned until the job ends if pin is not nil (run.pinned).
func (s *Server) putResults(ctx context.Context, rr *runResults, idx []int, pin *run) (string, int64, error) {
	if pin == nil {
		id, size, err := s.blobs.Put(ctx, &resultsReader{rr: rr, idx: idx})
		if err != nil {
			return "", 0, storageError("store the output", err)
		}
		return id, size, nil
	}
	st, err := s.blobs.Stage(ctx, &resultsReader{rr: rr, idx: idx})
	if err != nil {
		return "", 0, storageError("store the output", err)
	}
	defer st.Discard()
	s.pin(st.ID)
	pin.mu.Lock()
	pin.pinned = append(pin.pinned, st.ID)
	pin.mu.Unlock()
	if err := st.Commit(ctx); err != nil {
		return "", 0, storageError("store the output", err)
	}
	return st.ID, st.Size, nil
}

// resultsReader reads results one after the other.
type resultsReader struct {
	rr  *runResults
	idx []int
	cur ops.Result
	off int64
}

func (rd *resultsReader) Read(p []byte) (int, error) {
	for {
		if rd.cur == nil {
			if len(rd.idx) == 0 {
				return 0, io.EOF
			}
			res, err := rd.rr.Open(rd.idx[0])
			if err != nil {
				return 0, err
			}
			rd.cur, rd.off, rd.idx = res, 0, rd.idx[1:]
		}
		n, err := rd.cur.ReadAt(p, rd.off)
		rd.off += int64(n)
		if rd.off >= rd.cur.Size() || (err != nil && err != io.EOF) {
			rd.cur.Close()
			rd.cur = nil
			if err != nil && err != io.EOF {
				return n, err
			}
		}
		if n > 0 {
			return n, nil
		}
	}
}

// withParam returns a copy of params with k set to v.
func withParam(params map[string]string, k, v string) map[string]string {
	p := make(map[string]string, len(params)+1)
	for key, val := range params {
		p[key] = val
	}
	p[k] = v
	return p
}
