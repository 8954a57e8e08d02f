package client

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braid-hpc/braid/api"
)

// Client calls one server's control API. It is safe for concurrent use.
//
// Over HTTPS (the default) the client sends no request before it has
// pinned the server's certificate: by its fingerprint (WithFingerprint or
// a join token given to WithToken), or, with the cluster key, by a first
// request without credential whose answer must carry the server's proof
// that it holds the key for that very certificate (api.CertProof). Every
// connection after that must present the pinned certificate.
type Client struct {
	base     string
	hc       *http.Client
	token    string // the credential sent; empty: none
	key      []byte // checks the certificate proof; nil: none
	insecure bool
	err      error // a bad option, returned by every call

	// group are the clients of each server when several were given
	// (failover.go); cur is the one requests go to.
	group []*Client
	cur   atomic.Int32
	// failAfter is how long a member of a group may take to connect, or
	// to answer a request that changes nothing, before the next is tried.
	failAfter time.Duration

	mu      sync.Mutex
	fp      []byte // the pinned fingerprint; nil: not yet
	learned bool   // fp came from the key's proof, not an option
	learnMu sync.Mutex
}

// Option configures a Client.
type Option func(*Client)

// WithKey authenticates requests as the holder of the cluster key (the
// admin role, as api.Token) unless WithToken gives another credential,
// and pins the server's certificate by its proof of the key unless a
// fingerprint is given. Without a credential only the health check and
// the spec are reachable.
func WithKey(key []byte) Option {
	return func(c *Client) { c.key = slices.Clone(key) }
}

// WithToken authenticates requests with a token made by POST /v1/tokens
// (braid token create). A join token ("TOKEN.FINGERPRINT") also pins the
// server's certificate, unless WithFingerprint gives one.
func WithToken(token string) Option {
	return func(c *Client) {
		tok, fp, err := api.SplitJoinToken(token)
		if err != nil {
			c.err = fmt.Errorf("client: %w", err)
			return
		}
		c.token = tok
		if fp != nil && c.fp == nil {
			c.fp = fp
		}
	}
}

// WithFingerprint pins the server's certificate: its SHA-256 fingerprint
// must be fp (api.ParseFingerprint reads the usual forms).
func WithFingerprint(fp []byte) Option {
	return func(c *Client) {
		if len(fp) != sha256.Size {
			c.err = fmt.Errorf("client: %w", api.ErrFingerprint)
			return
		}
		c.fp = slices.Clone(fp)
	}
}

// WithInsecureHTTP speaks plain HTTP, to a server started with
// --insecure-http: credentials and answers travel readable and
// unprotected. The base URL's scheme becomes http.
func WithInsecureHTTP() Option {
	return func(c *Client) { c.insecure = true }
}

// WithFailoverAfter sets, for a client of several servers, how long a
// server may take to accept a connection (TCP and TLS) or to begin its
// answer to a GET or HEAD before the request goes to the next server
// (default DefaultFailoverAfter). It is what moves a client off a server
// that is stopped or stalled (SIGSTOP, a hung host): such a server still
// accepts TCP connections but never answers. A request that changes
// something (POST, PUT, DELETE) is sent elsewhere only when it cannot
// have arrived: its connection was refused or not set up in time. A
// client of one server ignores it.
func WithFailoverAfter(d time.Duration) Option {
	return func(c *Client) {
		if d <= 0 {
			c.err = fmt.Errorf("client: failover time %v: want a positive duration", d)
			return
		}
		c.failAfter = d
	}
}

// DefaultFailoverAfter is the failover time of a client of several
// servers without WithFailoverAfter: longer than a loaded server takes
// to answer a status poll (which waits up to a second), short enough that
// a stalled server costs a user seconds, not minutes.
const DefaultFailoverAfter = 10 * time.Second

// WithHTTPClient sends requests through hc instead of a default client.
// If hc's Transport is nil or an *http.Transport, the client uses a copy
// with its own TLS verification (the pinned certificate); any other
// RoundTripper is used as is and must verify the server itself.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.hc = hc }
}

// New returns a client of the server at baseURL, e.g.
// "https://10.0.0.1:7400". The client speaks HTTPS whatever the URL's
// scheme (a URL without one, or with http://, gets https://), unless
// WithInsecureHTTP. Several servers sharing one database may be given
// comma-separated: the client fails over between them (failover.go).
func New(baseURL string, opts ...Option) *Client {
	if urls := splitURLs(baseURL); len(urls) > 1 {
		return newGroup(urls, opts)
	}
	return newOne(baseURL, opts...)
}

// newOne returns a client of one server.
func newOne(baseURL string, opts ...Option) *Client {
	c := &Client{}
	for _, o := range opts {
		o(c)
	}
	base := strings.TrimRight(strings.TrimSpace(baseURL), "/")
	if _, rest, ok := strings.Cut(base, "://"); ok {
		base = rest
	}
	if c.insecure {
		c.base = "http://" + base
	} else {
		c.base = "https://" + base
	}
	if c.token == "" && c.key != nil {
		c.token = api.Token(c.key)
	}
	var hc http.Client
	if c.hc != nil {
		hc = *c.hc
	}
	switch t := hc.Transport.(type) {
	case nil:
		if c.insecure {
			hc.Transport = defaultTransport
		} else {
			tr := defaultTransport.Clone()
			tr.TLSClientConfig = c.tlsConfig(nil)
			hc.Transport = tr
		}
	case *http.Transport:
		if !c.insecure {
			tr := t.Clone()
			tr.TLSClientConfig = c.tlsConfig(t.TLSClientConfig)
			hc.Transport = tr
		}
	}
	c.hc = &hc
	return c
}

// tlsConfig returns base (or an empty config) set to accept exactly the
// pinned certificate.
func (c *Client) tlsConfig(base *tls.Config) *tls.Config {
	var conf *tls.Config
	if base != nil {
		conf = base.Clone()
	} else {
		conf = &tls.Config{}
	}
	// No chain of trust: the pinned fingerprint is checked instead.
	conf.InsecureSkipVerify = true
	conf.VerifyConnection = c.verify
	conf.MinVersion = max(conf.MinVersion, tls.VersionTLS13)
	return conf
}

// verify accepts a TLS connection only to the pinned certificate.
func (c *Client) verify(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: the server presented none", ErrCertificate)
	}
	got := api.Fingerprint(cs.PeerCertificates[0].Raw)
	c.mu.Lock()
	want := c.fp
	c.mu.Unlock()
	if want == nil {
		return ErrNoPin
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%w: it has fingerprint %s, not the pinned %s; if the server's certificate was replaced on purpose, "+
			"give the new fingerprint (--server-fingerprint) or a new join token", ErrCertificate,
			api.FormatFingerprint(got), api.FormatFingerprint(want))
	}
	return nil
}

// Fingerprint returns the fingerprint of the server's certificate the
// client pinned, nil if none yet (or over plain HTTP).
func (c *Client) Fingerprint() []byte {
	if c.group != nil {
		return c.current().Fingerprint()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.fp)
}

// pin makes sure the server's certificate is pinned before a request
// goes out: with the cluster key, it asks for the health check without
// credential and checks the proof in the answer.
func (c *Client) pin(ctx context.Context) error {
	if c.insecure {
		return nil
	}
	c.learnMu.Lock()
	defer c.learnMu.Unlock()
	c.mu.Lock()
	pinned := c.fp != nil
	c.mu.Unlock()
	if pinned {
		return nil
	}
	if c.key == nil {
		return ErrNoPin
	}
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}} // checked below
	defer tr.CloseIdleConnections()
	if c.failAfter > 0 {
		// A member of a group: a server that does not answer in time
		// is left for the next.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.failAfter)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+api.PathHealth, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		return fmt.Errorf("%w: no TLS certificate", ErrCertificate)
	}
	fp := api.Fingerprint(resp.TLS.PeerCertificates[0].Raw)
	if !hmac.Equal([]byte(resp.Header.Get(api.HeaderCertProof)), []byte(api.CertProof(c.key, fp))) {
		return fmt.Errorf("%w: the server did not prove that it holds the cluster key for its certificate %s: "+
			"its cluster key differs (check BRAID_KEY or --key-file), or something between us is not the braid server; "+
			"no credential was sent", ErrCertificate, api.FormatFingerprint(fp))
	}
	c.mu.Lock()
	c.fp, c.learned = fp, true
	c.mu.Unlock()
	return nil
}

// unpin forgets a fingerprint learned from the key's proof, so the next
// request learns the server's current certificate. It reports whether
// there was one.
func (c *Client) unpin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.learned {
		return false
	}
	c.fp, c.learned = nil, false
	return true
}

// defaultTransport keeps connections to a server open between polls.
var defaultTransport = &http.Transport{
	Proxy:               nil, // servers are cluster-internal
	MaxIdleConnsPerHost: 16,
	IdleConnTimeout:     90 * time.Second,
}

// URL returns the server's base URL (of a group, the one requests go to
// now).
func (c *Client) URL() string {
	if c.group != nil {
		return c.current().base
	}
	return c.base
}

// do sends a request and decodes a JSON answer into out (if non-nil). A
// non-2xx answer becomes an *Error.
func (c *Client) do(ctx context.Context, op, method, path string, body io.Reader, contentType string, out any) (*http.Response, error) {
	if c.group != nil {
		return c.doGroup(ctx, op, method, path, body, contentType, out)
	}
	if c.err != nil {
		return nil, fmt.Errorf("%s: %w", op, c.err)
	}
	var resp *http.Response
	for try := 0; ; try++ {
		if err := c.pin(ctx); err != nil {
			if !errors.Is(err, ErrCertificate) && !errors.Is(err, ErrNoPin) {
				// Nothing of the request was sent yet.
				err = notSent{fmt.Errorf("learning the certificate of %s: %w", c.base, err)}
			}
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err = c.hc.Do(req)
		if err == nil {
			break
		}
		// A certificate learned from the key's proof was replaced (a
		// server set up anew): learn the new one and, if the request
		// can be sent again, send it again once.
		if errors.Is(err, ErrCertificate) && c.unpin() && try == 0 && body == nil {
			continue
		}
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return resp, decodeError(op, resp)
	}
	if out == nil {
		return resp, nil
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return resp, fmt.Errorf("%s: decode answer: %w", op, err)
	}
	return resp, nil
}

func decodeError(op string, resp *http.Response) error {
	e := &Error{Op: op, Status: resp.StatusCode}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body api.Error
	if json.Unmarshal(b, &body) == nil && body.Message != "" {
		e.Message = body.Message
	} else if s := strings.TrimSpace(string(b)); s != "" && len(s) < 200 {
		e.Message = s
	} else {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}

func (c *Client) getJSON(ctx context.Context, op, path string, out any) error {
	_, err := c.do(ctx, op, http.MethodGet, path, nil, "", out)
	return err
}

func (c *Client) sendJSON(ctx context.Context, op, method, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	_, err = c.do(ctx, op, method, path, bytes.NewReader(b), api.ContentTypeJSON, out)
	return err
}

// Health checks that the server runs and returns its live workers.
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var h api.Health
	err := c.getJSON(ctx, "health", api.PathHealth, &h)
	return h, err
}

// Ops lists the operations the server can run.
func (c *Client) Ops(ctx context.Context) ([]api.OpInfo, error) {
	var l api.OpList
	err := c.getJSON(ctx, "list ops", api.PathOps, &l)
	return l.Ops, err
}

// OpOptions describe an operation uploaded with AddOp.
type OpOptions struct {
	// Doc describes the operation in listings.
	Doc string
	// Split and Merge are the defaults of jobs that do not say, e.g.
	// "lines:1M" and "reduce:sum".
	Split, Merge string
	// Params declares the parameters, NAME to default value. None
	// declared lets jobs pass any parameter named like an environment
	// variable.
	Params map[string]string
}

// AddOp uploads the WebAssembly module code as a new version of the
// operation name and returns its description.
func (c *Client) AddOp(ctx context.Context, name string, code io.Reader, o OpOptions) (api.OpInfo, error) {
	q := url.Values{}
	if o.Doc != "" {
		q.Set("doc", o.Doc)
	}
	if o.Split != "" {
		q.Set("split", o.Split)
	}
	if o.Merge != "" {
		q.Set("merge", o.Merge)
	}
	keys := make([]string, 0, len(o.Params))
	for k := range o.Params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		q.Add("param", k+"="+o.Params[k])
	}
	path := api.PathOps + "/" + url.PathEscape(name)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var info api.OpInfo
	_, err := c.do(ctx, "add operation "+name, http.MethodPut, path, io.NopCloser(code), api.ContentTypeBlob, &info)
	return info, err
}

// Op describes one operation.
func (c *Client) Op(ctx context.Context, name string) (api.OpInfo, error) {
	var info api.OpInfo
	err := c.getJSON(ctx, "describe operation "+name, api.PathOps+"/"+url.PathEscape(name), &info)
	return info, err
}

// RemoveOp removes a user operation; jobs that use it keep running it.
func (c *Client) RemoveOp(ctx context.Context, name string) error {
	_, err := c.do(ctx, "remove operation "+name, http.MethodDelete, api.PathOps+"/"+url.PathEscape(name), nil, "", nil)
	return err
}

// SubmitPipeline submits a pipeline of jobs and returns its first status.
func (c *Client) SubmitPipeline(ctx context.Context, req api.PipelineRequest) (api.PipelineStatus, error) {
	var st api.PipelineStatus
	err := c.sendJSON(ctx, "submit pipeline", http.MethodPost, api.PathPipelines, req, &st)
	return st, err
}

// Pipeline returns a pipeline's status with its steps' jobs.
func (c *Client) Pipeline(ctx context.Context, id uint64) (api.PipelineStatus, error) {
	var st api.PipelineStatus
	err := c.getJSON(ctx, "pipeline status", api.PathPipelines+"/"+strconv.FormatUint(id, 10), &st)
	return st, err
}

// WaitPipeline polls a pipeline until every step is final, calling
// progress (if non-nil) with each status, and returns the last one.
func (c *Client) WaitPipeline(ctx context.Context, id uint64, progress func(api.PipelineStatus)) (api.PipelineStatus, error) {
	delay := 50 * time.Millisecond
	for {
		st, err := c.Pipeline(ctx, id)
		if err != nil {
			return st, err
		}
		if progress != nil {
			progress(st)
		}
		final := true
		for _, j := range st.Steps {
			final = final && j.State.Final()
		}
		if final {
			return st, nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return st, fmt.Errorf("wait for pipeline %d: %w", id, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
}

// Put uploads everything r yields as a blob and returns its ID. The body
// streams: r is not held in memory.
func (c *Client) Put(ctx context.Context, r io.Reader) (string, error) {
	info, err := c.PutInfo(ctx, r)
	return info.ID, err
}

// PutInfo is Put returning the blob's size too.
func (c *Client) PutInfo(ctx context.Context, r io.Reader) (api.BlobInfo, error) {
	return c.putInfo(ctx, api.PathBlobs, r)
}

// PutMember is PutInfo of a member of a dataset about to be made
// (PutDataset): deleting a dataset that lists it deletes this upload
// too, where an upload of the same bytes on its own (Put) stays.
func (c *Client) PutMember(ctx context.Context, r io.Reader) (api.BlobInfo, error) {
	return c.putInfo(ctx, api.PathBlobs+api.QueryMember, r)
}

func (c *Client) putInfo(ctx context.Context, path string, r io.Reader) (api.BlobInfo, error) {
	var info api.BlobInfo
	if r == nil {
		r = http.NoBody
	}
	_, err := c.do(ctx, "upload blob", http.MethodPost, path, io.NopCloser(r), api.ContentTypeBlob, &info)
	return info, err
}

// Get downloads blob id into w and returns the number of bytes written.
// It checks the bytes against id, their sha256, as they arrive: an
// error (ErrIncomplete, ErrCorrupt) means that what w received must not
// be used. If w has a method SetSize(int64), Get calls it with the blob's
// size before the first byte, so that a progress display can show a
// percentage.
func (c *Client) Get(ctx context.Context, id string, w io.Writer) (int64, error) {
	return c.get(ctx, id, "", w)
}

// GetMember is Get for a member of dataset: a client may read the
// members of every dataset it may read, whoever stored them (the members
// of a job's output dataset are that job's results).
func (c *Client) GetMember(ctx context.Context, dataset, id string, w io.Writer) (int64, error) {
	return c.get(ctx, id, "?dataset="+url.QueryEscape(dataset), w)
}

func (c *Client) get(ctx context.Context, id, query string, w io.Writer) (int64, error) {
	op := "download blob " + id
	resp, err := c.do(ctx, op, http.MethodGet, api.PathBlobs+"/"+url.PathEscape(id)+query, nil, "", nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if sw, ok := w.(interface{ SetSize(int64) }); ok && resp.ContentLength >= 0 {
		sw.SetSize(resp.ContentLength)
	}
	// A blob's ID is the sha256 of its bytes: check them as they come.
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), resp.Body)
	if err != nil || resp.ContentLength >= 0 && n != resp.ContentLength {
		cause := ""
		if err != nil {
			cause = " (" + err.Error() + ")"
		}
		return n, fmt.Errorf("%s: the download stopped after %d of %d bytes%s; if the server logs the blob as corrupt, upload the same bytes again to heal it: %w",
			op, n, resp.ContentLength, cause, ErrIncomplete)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != id {
		return n, fmt.Errorf("%s: the bytes received hash to sha256 %s, not to the blob's id: refused, do not use them: %w", op, sum, ErrCorrupt)
	}
	return n, nil
}

// Blobs lists the stored blobs.
func (c *Client) Blobs(ctx context.Context) ([]api.BlobInfo, error) {
	var l api.BlobList
	err := c.getJSON(ctx, "list blobs", api.PathBlobs, &l)
	return l.Blobs, err
}

// DeleteBlob deletes a blob no unfinished job uses.
func (c *Client) DeleteBlob(ctx context.Context, id string) error {
	_, err := c.do(ctx, "delete blob "+id, http.MethodDelete, api.PathBlobs+"/"+url.PathEscape(id), nil, "", nil)
	return err
}

// Submit submits a job and returns its first status.
func (c *Client) Submit(ctx context.Context, req api.JobRequest) (api.JobStatus, error) {
	var st api.JobStatus
	err := c.sendJSON(ctx, "submit job", http.MethodPost, api.PathJobs, req, &st)
	return st, err
}

func jobPath(id uint64) string { return api.PathJobs + "/" + strconv.FormatUint(id, 10) }

// Status returns a job's status.
func (c *Client) Status(ctx context.Context, id uint64) (api.JobStatus, error) {
	var st api.JobStatus
	err := c.getJSON(ctx, fmt.Sprintf("status of job %d", id), jobPath(id), &st)
	return st, err
}

// Wait polls a job until its state is final and returns that status.
// Each poll asks the server to hold its answer until the job is final or
// the poll interval passed (GET /v1/jobs/{id}?wait=), so Wait returns as
// soon as the job ends; the interval backs off from 50ms to 1s. progress,
// if non-nil, sees every status polled. Failed polls are retried with the
// same backoff until ctx ends; a 4xx answer ends the wait.
func (c *Client) Wait(ctx context.Context, id uint64, progress func(api.JobStatus)) (api.JobStatus, error) {
	interval := 50 * time.Millisecond
	var last api.JobStatus
	for {
		var st api.JobStatus
		err := c.getJSON(ctx, fmt.Sprintf("status of job %d", id), jobPath(id)+"?wait="+interval.String(), &st)
		switch {
		case err == nil:
			last = st
			if progress != nil {
				progress(st)
			}
			if st.State.Final() {
				return st, nil
			}
		case ctx.Err() != nil:
			return last, fmt.Errorf("wait for job %d: %w", id, ctx.Err())
		case StatusOf(err)/100 == 4:
			return last, err
		default:
			// The server may be restarting: try again after a while.
			t := time.NewTimer(interval)
			select {
			case <-ctx.Done():
				t.Stop()
				return last, fmt.Errorf("wait for job %d: %w (last error: %v)", id, ctx.Err(), err)
			case <-t.C:
			}
		}
		interval = min(interval*3/2, time.Second)
	}
}

// Jobs lists jobs, newest first: those in state (all if empty), at most
// limit (0 means the server's default, 100).
func (c *Client) Jobs(ctx context.Context, state api.JobState, limit int) ([]api.JobStatus, error) {
	q := url.Values{}
	if state != "" {
		q.Set("state", string(state))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := api.PathJobs
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var l api.JobList
	err := c.getJSON(ctx, "list jobs", path, &l)
	return l.Jobs, err
}

// Cancel cancels an unfinished job.
func (c *Client) Cancel(ctx context.Context, id uint64) (api.JobStatus, error) {
	var st api.JobStatus
	err := c.sendJSON(ctx, fmt.Sprintf("cancel job %d", id), http.MethodPost, jobPath(id)+"/cancel", struct{}{}, &st)
	return st, err
}

// Workers lists the workers the server knows, live and dead.
func (c *Client) Workers(ctx context.Context) ([]api.WorkerInfo, error) {
	var l api.WorkerList
	err := c.getJSON(ctx, "list workers", api.PathWorkers, &l)
	return l.Workers, err
}

// Units returns the tries of a job's units that brought a result back:
// the worker, stream, send and arrival times and compute time of each,
// and the worker thread that ran it and when (api.UnitSpan), for a
// timeline per worker thread. The server stores them when the job ends;
// Kept says whether it had them (not for jobs that ended on a server
// with an older store).
func (c *Client) Units(ctx context.Context, id uint64) (api.UnitTimeline, error) {
	var tl api.UnitTimeline
	err := c.getJSON(ctx, fmt.Sprintf("units of job %d", id), jobPath(id)+"/units", &tl)
	return tl, err
}

func workerPath(id string) string { return api.PathWorkers + "/" + url.PathEscape(id) }

// Worker returns one worker. With fresh, the server first asks the worker
// for its current figures over the data plane.
func (c *Client) Worker(ctx context.Context, id string, fresh bool) (api.WorkerInfo, error) {
	path := workerPath(id)
	if fresh {
		path += "?fresh=1"
	}
	var w api.WorkerInfo
	err := c.getJSON(ctx, "worker "+id, path, &w)
	return w, err
}

// Register registers a worker.
func (c *Client) Register(ctx context.Context, r api.Register) (api.Registration, error) {
	var reg api.Registration
	err := c.sendJSON(ctx, "register worker", http.MethodPost, api.PathWorkers, r, &reg)
	return reg, err
}

// Update replaces what worker id registered, or registers it again under
// the same id with a server that forgot it.
func (c *Client) Update(ctx context.Context, id string, r api.Register) (api.Registration, error) {
	var reg api.Registration
	err := c.sendJSON(ctx, "update worker "+id, http.MethodPut, workerPath(id), r, &reg)
	return reg, err
}

// Heartbeat sends worker id's sign of life. An error matching ErrNotFound
// means the server does not know the worker: register again.
func (c *Client) Heartbeat(ctx context.Context, id string, hb api.Heartbeat) (api.Registration, error) {
	var reg api.Registration
	err := c.sendJSON(ctx, "heartbeat of worker "+id, http.MethodPost, workerPath(id)+"/heartbeat", hb, &reg)
	return reg, err
}

// Deregister removes worker id; its units run elsewhere.
func (c *Client) Deregister(ctx context.Context, id string) error {
	_, err := c.do(ctx, "deregister worker "+id, http.MethodDelete, workerPath(id), nil, "", nil)
	return err
}

// CreateToken makes a token of role (api.RoleAdmin, RoleClient or
// RoleWorker) named name (empty: the server picks one). The answer holds
// the secret, which the server shows only this once.
func (c *Client) CreateToken(ctx context.Context, role, name string) (api.TokenCreated, error) {
	return c.NewToken(ctx, api.TokenRequest{Role: role, Name: name})
}

// NewToken is CreateToken with every field of the request, such as the
// group whose tokens share their jobs, blobs and pipelines.
func (c *Client) NewToken(ctx context.Context, req api.TokenRequest) (api.TokenCreated, error) {
	var t api.TokenCreated
	err := c.sendJSON(ctx, "create token", http.MethodPost, api.PathTokens, req, &t)
	return t, err
}

// Tokens lists the server's tokens, revoked ones included.
func (c *Client) Tokens(ctx context.Context) ([]api.TokenInfo, error) {
	var l api.TokenList
	err := c.getJSON(ctx, "list tokens", api.PathTokens, &l)
	return l.Tokens, err
}

// RevokeToken revokes the token with ID or name ref; requests with it fail
// from then on.
func (c *Client) RevokeToken(ctx context.Context, ref string) (api.TokenInfo, error) {
	var t api.TokenInfo
	_, err := c.do(ctx, "revoke token "+ref, http.MethodDelete, api.PathTokens+"/"+url.PathEscape(ref), nil, "", &t)
	return t, err
}

// errorsAs is errors.As for *Error.
func errorsAs(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// StatusOf returns the HTTP status of an error from the server, or 0 if
// err did not come from the server's answer (a network error).
func StatusOf(err error) int {
	if e, ok := errorsAs(err); ok {
		return e.Status
	}
	return 0
}
