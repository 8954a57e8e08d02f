package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/store"
)

// handlerFunc serves one request; an error becomes a JSON error answer.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// route is one method of one endpoint and the roles that may call it;
// routes() lists them all. Access is decided here, in one table: a
// handler checks no role but for finer limits within a route (a worker
// reads only modules).
type route struct {
	pattern string
	method  string
	// roles may call the route; open means anyone, without a credential.
	roles roles
	h     handlerFunc
}

// routes is the control API's route table.
func (s *Server) routes() []route {
	const get, head, post, put, del = http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete
	return []route{
		{api.SpecPath, get, open, s.getSpec},
		{api.PathHealth, get, open, s.getHealth},
		// Workers list the operations to prefetch their modules.
		{api.PathOps, get, anyRole, s.getOps},
		{api.PathOps + "/{name}", get, clientSide, s.getOp},
		{api.PathOps + "/{name}", put, clientSide, s.putOp},
		{api.PathOps + "/{name}", del, clientSide, s.deleteOp},
		{api.PathMetrics, get, lookers, s.getMetrics},
		{api.PathUI, get, open, s.getUI},
		{api.PathUI, head, open, s.getUI},
		{api.PathWorkers, get, lookers, s.listWorkers},
		{api.PathWorkers, post, workerSide, s.postWorker},
		{api.PathWorkers + "/{id}", get, lookers, s.getWorker},
		{api.PathWorkers + "/{id}", put, workerSide, s.putWorker},
		{api.PathWorkers + "/{id}", del, workerSide, s.deleteWorker},
		{api.PathWorkers + "/{id}/heartbeat", post, workerSide, s.postHeartbeat},
		{api.PathBlobs, get, clientSide, s.listBlobs},
		{api.PathBlobs, post, clientSide, s.postBlob},
		// Workers download modules by hash; getBlob refuses them the rest.
		{api.PathBlobs + "/{id}", get, anyRole, s.getBlob},
		{api.PathBlobs + "/{id}", head, anyRole, s.getBlob},
		{api.PathBlobs + "/{id}", del, clientSide, s.deleteBlob},
		{api.PathDatasets, post, clientSide, s.postDataset},
		{api.PathDatasets + "/{id}", get, clientSide, s.getDataset},
		{api.PathJobs, get, lookers, s.listJobs},
		{api.PathJobs, post, clientSide, s.postJob},
		{api.PathJobs + "/{id}", get, lookers, s.getJob},
		{api.PathJobs + "/{id}/units", get, lookers, s.getUnits},
		{api.PathJobs + "/{id}/cancel", post, clientSide, s.cancelJob},
		{api.PathPipelines, post, clientSide, s.postPipeline},
		{api.PathPipelines + "/{id}", get, clientSide, s.getPipeline},
		{api.PathTokens, get, adminOnly, s.listTokens},
		{api.PathTokens, post, adminOnly, s.postToken},
		{api.PathTokens + "/{id}", del, adminOnly, s.revokeToken},
	}
}

// Handler returns the control API's HTTP handler. Run serves it; tests may
// mount it elsewhere.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	byPattern := map[string][]route{}
	var patterns []string
	for _, rt := range s.routes() {
		if byPattern[rt.pattern] == nil {
			patterns = append(patterns, rt.pattern)
		}
		byPattern[rt.pattern] = append(byPattern[rt.pattern], rt)
	}
	for _, p := range patterns {
		mux.Handle(p, s.metrics.instrument(p, s.endpoint(p, byPattern[p])))
	}
	mux.Handle("/", s.metrics.instrument("other", s.endpoint("/", nil)))
	return mux
}

// endpoint serves the routes of one path: method dispatch, authentication,
// the role check and error answers.
func (s *Server) endpoint(pattern string, rts []route) http.Handler {
	m := make(map[string]route, len(rts))
	allowed := make([]string, 0, len(rts))
	for _, rt := range rts {
		m[rt.method] = rt
		allowed = append(allowed, rt.method)
	}
	slices.Sort(allowed)
	allow := strings.Join(allowed, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.proof != "" {
			w.Header().Set(api.HeaderCertProof, s.proof)
		}
		err := func() error {
			rt, ok := m[r.Method]
			switch {
			case rts == nil:
				return kindf(errNotFound, "no endpoint %s; the API is described at %s", r.URL.Path, api.SpecPath)
			case !ok:
				w.Header().Set("Allow", allow)
				return kindf(errMethod, "%s does not take %s; it takes %s", r.URL.Path, r.Method, allow)
			case rt.roles == open:
				return rt.h(w, r)
			}
			p, err := s.authenticate(r)
			if err != nil {
				return err
			}
			if err := authorize(p, rt.roles, r, pattern); err != nil {
				return err
			}
			return rt.h(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
		}()
		if err != nil {
			s.writeError(w, r, err)
		}
	})
}

// writeError answers with err's status and message as an api.Error.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := httpStatus(err)
	level := slog.LevelDebug
	if code >= 500 {
		level = slog.LevelWarn
	}
	s.log.Log(r.Context(), level, "request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", err)
	writeJSON(w, code, &api.Error{Message: err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) error {
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// readJSON decodes a JSON request body of at most MaxRequest bytes into v,
// rejecting unknown fields, so a misspelt field is an error, not ignored.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, what string, v any) error {
	return s.readJSONMax(w, r, what, v, s.cfg.MaxRequest)
}

// readJSONMax is readJSON with a bound of its own on the body.
func (s *Server) readJSONMax(w http.ResponseWriter, r *http.Request, what string, v any, limit int64) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return fmt.Errorf("%s: body larger than %d bytes: %w", what, limit, err)
		}
		if errors.Is(err, io.EOF) {
			return kindf(errBadRequest, "%s: empty body; send a JSON object", what)
		}
		return kindf(errBadRequest, "%s: %v", what, err)
	}
	if dec.More() {
		return kindf(errBadRequest, "%s: more than one JSON value in the body", what)
	}
	return nil
}

func (s *Server) getSpec(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", api.ContentTypeSpec)
	_, err := w.Write(api.Spec)
	return err
}

func (s *Server) getHealth(w http.ResponseWriter, r *http.Request) error {
	s.mu.Lock()
	n := len(s.peers)
	s.mu.Unlock()
	return writeJSON(w, http.StatusOK, &api.Health{Status: "ok", Workers: n})
}

func (s *Server) getOps(w http.ResponseWriter, r *http.Request) error {
	list := api.OpList{Ops: []api.OpInfo{}}
	for _, name := range s.cfg.Ops.Names() {
		op, err := s.cfg.Ops.Lookup(name)
		if err != nil {
			continue
		}
		list.Ops = append(list.Ops, builtinInfo(op))
	}
	who := caller(r)
	for _, rec := range s.userOps.list() {
		oi := opInfo(rec)
		if who.role == api.RoleWorker || who.role == api.RoleAdmin {
			oi.Tenant = rec.Owner
		}
		list.Ops = append(list.Ops, oi)
	}
	return writeJSON(w, http.StatusOK, &list)
}

// Blobs.

func blobID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !store.ValidID(id) {
		return "", kindf(errBadRequest, "%q is not a blob id: want the 64 lowercase hex digits that the upload returned", id)
	}
	return id, nil
}

func (s *Server) postBlob(w http.ResponseWriter, r *http.Request) error {
	if r.ContentLength >= 0 {
		if err := s.uploadSize("upload", r.ContentLength); err != nil {
			return err
		}
	}
	body := s.limitUpload(w, r, "upload")
	defer body.done()
	st, err := s.blobs.Stage(r.Context(), body)
	if body.err != nil {
		return body.err
	}
	if err != nil {
		return storageError("upload", err)
	}
	defer st.Discard()
	id, size := st.ID, st.Size
	// Pinned from before it is in place until it is recorded as an
	// upload, so that removing a job's blobs cannot take it meanwhile.
	s.pin(id)
	defer s.unpin(id)
	if err := st.Commit(r.Context()); err != nil {
		return storageError("upload", err)
	}
	if err := s.claimManifest(r.Context(), caller(r), id, "upload"); err != nil {
		return err
	}
	add := s.db.AddUpload
	if r.URL.Query().Get("member") == "1" {
		add = s.db.AddMemberUpload // see api.QueryMember
	}
	if err := add(r.Context(), id, caller(r).owner()); err != nil {
		return storageError("upload: record it", err)
	}
	s.log.Debug("blob stored", "blob", id, "bytes", size)
	w.Header().Set("Location", api.PathBlobs+"/"+id)
	return writeJSON(w, http.StatusCreated, &api.BlobInfo{ID: id, Size: size})
}

func (s *Server) listBlobs(w http.ResponseWriter, r *http.Request) error {
	infos, err := s.blobs.List(r.Context())
	if err != nil {
		return err
	}
	if p := caller(r); !p.seesAll() {
		own, err := s.db.OwnedBlobs(r.Context(), p.owner())
		if err != nil {
			return err
		}
		slices.Sort(own)
		infos = slices.DeleteFunc(infos, func(b store.BlobInfo) bool {
			_, found := slices.BinarySearch(own, b.ID)
			return !found
		})
	}
	list := api.BlobList{Blobs: make([]api.BlobInfo, 0, len(infos))}
	for _, b := range infos {
		list.Blobs = append(list.Blobs, api.BlobInfo{ID: b.ID, Size: b.Size})
	}
	return writeJSON(w, http.StatusOK, &list)
}

// getBlob streams a blob, honouring Range requests, for GET and HEAD.
func (s *Server) getBlob(w http.ResponseWriter, r *http.Request) error {
	id, err := blobID(r)
	if err != nil {
		return err
	}
	if p := caller(r); p.role == api.RoleWorker {
		mod, err := s.db.IsModule(r.Context(), id)
		if err != nil {
			return err
		}
		if !mod {
			return kindf(errForbidden, "a worker credential may read only the modules of user operations, and blob %s is not one", id)
		}
	} else if ok, err := s.blobVisible(r.Context(), p, id); err != nil {
		return err
	} else if !ok {
		if ok, err := s.memberVisible(r.Context(), p, r.URL.Query().Get("dataset"), id); err != nil || !ok {
			if err != nil {
				return err
			}
			return kindf(errNotFound, "no blob %s on this server", id)
		}
	}
	f, _, err := s.blobs.Open(id)
	if errors.Is(err, store.ErrNotFound) {
		if gone := s.expiredOutput(r.Context(), id); gone != nil {
			return gone
		}
		return kindf(errNotFound, "no blob %s on this server", id)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := s.blobs.Stat(id)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", api.ContentTypeBlob)
	w.Header().Set("ETag", `"`+id+`"`)
	w.Header().Set("Cache-Control", "immutable")
	rd := &errReader{ReadSeeker: f}
	http.ServeContent(w, r, "", info.ModTime, rd)
	if errors.Is(rd.err, store.ErrCorrupt) {
		// The answer stops short of its length, so the client sees the
		// download fail; the operator learns why here.
		s.log.Error("a download found a corrupt blob; its answer was cut short", "blob", id, "err", rd.err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// errReader remembers the error of the last Read.
type errReader struct {
	io.ReadSeeker
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.ReadSeeker.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}

func (s *Server) deleteBlob(w http.ResponseWriter, r *http.Request) error {
	id, err := blobID(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	p := caller(r)
	if ok, err := s.blobVisible(ctx, p, id); err != nil {
		return err
	} else if !ok {
		return kindf(errNotFound, "no blob %s on this server", id)
	}
	members, isDataset, err := s.membersOf(ctx, id)
	if err != nil {
		return err
	}
	n, err := s.blobNeedsOf(ctx, id)
	if err != nil {
		return err
	}
	if others, err := s.othersNeed(ctx, p, append(n.uploaders, n.datasetUploaders...), append(n.users, n.kept...)); err != nil {
		return err
	} else if others {
		// Another owner uploaded the same bytes, or a dataset or job of
		// another owner needs them: only this owner's upload goes, and the
		// blob stays theirs. So do this owner's uploads of a dataset's
		// members.
		if err := s.db.RemoveUpload(ctx, id, p.owner()); err != nil {
			return err
		}
		if isDataset {
			if err := s.deleteDatasetMembers(id, members, []string{p.owner()}); err != nil {
				return err
			}
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if len(n.users) > 0 {
		return kindf(errConflict, "blob %s is used by unfinished jobs %s; cancel them or wait for them to finish", id, joinIDs(n.users))
	}
	if len(n.kept) > 0 {
		what := "the output"
		if len(n.holders) > 0 {
			what = "the output, or a member of the output dataset,"
		}
		return kindf(errConflict, "blob %s is %s of jobs %s, kept until their retention ends (braid server --retain); it cannot be deleted before", id, what, joinIDs(n.kept))
	}
	if len(n.datasets) > 0 {
		return kindf(errConflict, "blob %s is a member of datasets %s; delete the dataset instead, which deletes its members that nothing else needs", id, strings.Join(n.datasets, ", "))
	}
	if used, err := s.db.ModuleUsed(ctx, id); err != nil {
		return err
	} else if used {
		return kindf(errConflict, "blob %s is the module of an operation; remove the operation first (braid op rm NAME)", id)
	}
	s.pinMu.Lock()
	err = s.blobs.Delete(id)
	if err == nil && isDataset {
		s.forgetDataset(ctx, id)
	}
	s.pinMu.Unlock()
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return kindf(errNotFound, "no blob %s on this server", id)
		}
		return err
	}
	s.known.forget(id)
	for _, o := range n.uploaders {
		if err := s.db.RemoveUpload(ctx, id, o); err != nil {
			return err
		}
	}
	if isDataset {
		if err := s.deleteDatasetMembers(id, members, n.uploaders); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// blobNeeds are what needs a blob a client asks to delete.
type blobNeeds struct {
	uploaders []string // the owners that uploaded it
	users     []uint64 // the unfinished jobs that use it
	kept      []uint64 // the done jobs whose kept output is it or a dataset that lists it
	// holders are the datasets that live and list it; datasets those of
	// them that are uploads, and datasetUploaders their owners.
	holders, datasets, datasetUploaders []string
}

// blobNeedsOf finds what needs blob id.
func (s *Server) blobNeedsOf(ctx context.Context, id string) (blobNeeds, error) {
	var n blobNeeds
	var err error
	if n.uploaders, err = s.db.Uploaders(ctx, id); err != nil {
		return n, err
	}
	if n.users, err = s.db.BlobUsers(ctx, id); err != nil {
		return n, err
	}
	if n.kept, err = s.db.KeptOutputs(ctx, id); err != nil {
		return n, err
	}
	if n.holders, err = s.db.DatasetsOf(ctx, id); err != nil {
		return n, err
	}
	for _, d := range n.holders {
		ups, err := s.db.Uploaders(ctx, d)
		if err != nil {
			return n, err
		}
		if len(ups) > 0 {
			n.datasets = append(n.datasets, d)
			n.datasetUploaders = append(n.datasetUploaders, ups...)
		}
	}
	return n, nil
}

func joinIDs(ids []uint64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(parts, ", ")
}

// Jobs.

func jobID(r *http.Request) (uint64, error) {
	s := r.PathValue("id")
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, kindf(errBadRequest, "%q is not a job id: want a positive whole number", s)
	}
	return id, nil
}

func (s *Server) postJob(w http.ResponseWriter, r *http.Request) error {
	var req api.JobRequest
	if err := s.readJSON(w, r, "job request", &req); err != nil {
		return err
	}
	st, err := s.submit(r.Context(), caller(r), req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", api.PathJobs+"/"+strconv.FormatUint(st.Job, 10))
	return writeJSON(w, http.StatusAccepted, &st)
}

// maxWait bounds how long GET /v1/jobs/{id}?wait= holds an answer.
const maxWait = time.Minute

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	var wait time.Duration
	if ws := r.URL.Query().Get("wait"); ws != "" {
		d, err := time.ParseDuration(ws)
		if err != nil || d < 0 {
			return kindf(errBadRequest, "wait=%q: want a duration such as 30s", ws)
		}
		wait = min(d, maxWait)
	}
	if _, err := s.visibleJob(r.Context(), caller(r), id); err != nil {
		return err
	}
	if wait > 0 {
		s.waitJob(r.Context(), id, wait)
	}
	st, err := s.status(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, &st)
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := caller(r)
	f := store.JobFilter{State: store.JobState(q.Get("state"))}
	if !p.seesAll() {
		f.Owner = p.owner()
	}
	if f.State != "" && !api.JobState(f.State).Valid() {
		return kindf(errBadRequest, "state=%q: want queued, running, done, failed or canceled", f.State)
	}
	if ls := q.Get("limit"); ls != "" {
		n, err := strconv.Atoi(ls)
		if err != nil || n < 1 {
			return kindf(errBadRequest, "limit=%q: want a whole number of at least 1", ls)
		}
		f.Limit = min(n, 10000)
	}
	jobs, err := s.db.ListJobs(r.Context(), f)
	if err != nil {
		return err
	}
	if f.State != "" {
		// Jobs whose end is not yet in the store are listed by that end.
		ids := s.lc.UnsavedIn(f.State)
		for _, id := range ids {
			if j, err := s.db.Job(r.Context(), id); err == nil && p.sees(j.Owner) && !slices.ContainsFunc(jobs, func(o store.Job) bool { return o.ID == id }) {
				jobs = append(jobs, j)
			}
		}
		if len(ids) > 0 {
			slices.SortFunc(jobs, func(a, b store.Job) int { return cmp.Compare(b.ID, a.ID) })
		}
	}
	list := api.JobList{Jobs: make([]api.JobStatus, 0, len(jobs))}
	for _, j := range jobs {
		st := s.jobStatus(j)
		if f.State != "" && st.State != api.JobState(f.State) {
			continue // ended, but not yet in the store
		}
		if f.Limit > 0 && len(list.Jobs) == f.Limit {
			break
		}
		list.Jobs = append(list.Jobs, st)
	}
	return writeJSON(w, http.StatusOK, &list)
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	if _, err := s.visibleJob(r.Context(), caller(r), id); err != nil {
		return err
	}
	if err := s.cancel(r.Context(), id); err != nil {
		return err
	}
	st, err := s.status(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, &st)
}

// Workers.

func (s *Server) postWorker(w http.ResponseWriter, r *http.Request) error {
	var reg api.Register
	if err := s.readJSON(w, r, "worker registration", &reg); err != nil {
		return err
	}
	ans, err := s.register(r.Context(), "", reg, caller(r), r.RemoteAddr)
	if err != nil {
		return err
	}
	s.owners.claim(ans.Worker, caller(r))
	w.Header().Set("Location", api.PathWorkers+"/"+ans.Worker)
	return writeJSON(w, http.StatusCreated, &ans)
}

func (s *Server) putWorker(w http.ResponseWriter, r *http.Request) error {
	var reg api.Register
	if err := s.readJSON(w, r, "worker registration", &reg); err != nil {
		return err
	}
	if err := s.owners.check(r.PathValue("id"), caller(r)); err != nil {
		return err
	}
	ans, err := s.register(r.Context(), r.PathValue("id"), reg, caller(r), r.RemoteAddr)
	if err != nil {
		return err
	}
	s.owners.claim(ans.Worker, caller(r))
	return writeJSON(w, http.StatusOK, &ans)
}

func (s *Server) postHeartbeat(w http.ResponseWriter, r *http.Request) error {
	var hb api.Heartbeat
	if err := s.readJSON(w, r, "heartbeat", &hb); err != nil {
		return err
	}
	if err := s.owners.check(r.PathValue("id"), caller(r)); err != nil {
		return err
	}
	ans, err := s.heartbeat(r.Context(), r.PathValue("id"), hb)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, &ans)
}

func (s *Server) getWorker(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if fresh := r.URL.Query().Get("fresh"); fresh != "" && fresh != "0" && fresh != "false" {
		if caller(r).role == api.RoleMonitor {
			return kindf(errForbidden, "a monitor credential may read a worker's last figures, not ask it for fresh ones (fresh=%s); drop fresh or use a client token", fresh)
		}
		if err := s.refresh(r.Context(), id); err != nil {
			return err
		}
	}
	rec, err := s.db.Worker(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return kindf(errNotFound, "no worker %s; see GET %s", id, api.PathWorkers)
	}
	if err != nil {
		return err
	}
	info := s.workerInfo(rec)
	return writeJSON(w, http.StatusOK, &info)
}

func (s *Server) listWorkers(w http.ResponseWriter, r *http.Request) error {
	recs, err := s.db.Workers(r.Context())
	if err != nil {
		return err
	}
	list := api.WorkerList{Workers: make([]api.WorkerInfo, 0, len(recs))}
	for _, rec := range recs {
		list.Workers = append(list.Workers, s.workerInfo(rec))
	}
	return writeJSON(w, http.StatusOK, &list)
}

func (s *Server) deleteWorker(w http.ResponseWriter, r *http.Request) error {
	if err := s.owners.check(r.PathValue("id"), caller(r)); err != nil {
		return err
	}
	if err := s.deregister(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	s.owners.forget(r.PathValue("id"))
	w.WriteHeader(http.StatusNoContent)
	return nil
}
