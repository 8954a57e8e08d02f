package server_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/testwait"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/worker"
)

// tinyModule is the smallest WASI command module: it exports _start and a
// memory and does nothing.
var tinyModule = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type: () -> ()
	0x03, 0x02, 0x01, 0x00, // function 0 has type 0
	0x05, 0x03, 0x01, 0x00, 0x01, // memory: 1 page
	0x07, 0x13, 0x02, // exports:
	0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00, // _start: function 0
	0x06, 'm', 'e', 'm', 'o', 'r', 'y', 0x02, 0x00, // memory: memory 0
	0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b, // code: an empty body
}

// credential is one way a request may be authenticated.
type credential struct {
	name string
	// header is the Authorization value; empty for none.
	header string
	// role is the role it has; empty for none (401 expected).
	role string
	// msg is in the 401 answer.
	msg string
	// join is the join token of a client token, whose records only it
	// sees; empty for the others.
	join string
}

// credentials makes a token of each role on c's server, and one revoked.
func credentials(t *testing.T, c *cluster) []credential {
	t.Helper()
	mk := func(role string) string {
		tok, err := c.c.CreateToken(t.Context(), role, "")
		if err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}
	cl, err := c.c.CreateToken(t.Context(), api.RoleClient, "")
	if err != nil {
		t.Fatal(err)
	}
	revoked, err := c.c.CreateToken(t.Context(), api.RoleAdmin, "gone")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.c.RevokeToken(t.Context(), "gone"); err != nil {
		t.Fatal(err)
	}
	return []credential{
		{name: "none", msg: "no credential"},
		{name: "malformed", header: "Basic dXNlcjpwYXNz", msg: "the Authorization header is not"},
		{name: "other key", header: "Bearer " + api.Token([]byte("another cluster key")), msg: "not derived from its cluster key"},
		{name: "unknown token", header: "Bearer " + api.TokenPrefix + "AAAA", msg: "unknown token"},
		{name: "revoked", header: "Bearer " + revoked.Token, msg: "token " + revoked.ID + " (gone) was revoked at"},
		{name: "worker", header: "Bearer " + mk(api.RoleWorker), role: api.RoleWorker},
		{name: "client", header: "Bearer " + cl.Token, role: api.RoleClient, join: cl.Join},
		{name: "monitor", header: "Bearer " + mk(api.RoleMonitor), role: api.RoleMonitor},
		{name: "admin token", header: "Bearer " + mk(api.RoleAdmin), role: api.RoleAdmin},
		{name: "cluster key", header: "Bearer " + api.Token(testKey), role: api.RoleAdmin},
	}
}

// request is a request to one route, made afresh for each call (a
// DELETE needs something new to delete).
type request struct {
	path string
	body []byte
}

// fixture is how to call one route: who may (the policy, written here
// again so that a change of the route table must change the test too)
// and how to make a request that succeeds for them.
type fixture struct {
	// roles that may call the route, space-separated in api.Roles
	// order; empty for an open route.
	roles string
	// mk makes the request as c, which makes records as the calling
	// credential's owner (the cluster key's for the credentials without
	// records of their own).
	mk func(c *cluster) request
}

// Who may call a route.
const (
	anyone      = ""
	admin       = "admin"
	adminClient = "admin client"
	adminWorker = "admin worker"
	anyRole     = "admin client worker"
	lookers     = "admin client monitor"
)

// matrixFixture says, for each route as "METHOD pattern", who may call it
// and how to make a request that succeeds for them.
func matrixFixture(t *testing.T, c *cluster, wk *testWorker) map[string]fixture {
	t.Helper()
	ctx := t.Context()
	var n atomic.Int64
	uniq := func() string { return fmt.Sprint(n.Add(1)) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	reg := api.Register{Name: "matrix", Addresses: wk.w.Addrs(), Threads: 1, Ops: []string{"noop"}}
	regBody, _ := json.Marshal(reg)
	register := func() string {
		r, err := c.c.Register(ctx, reg)
		must(err)
		return r.Worker
	}
	live := register()
	mod, err := c.c.AddOp(ctx, "matrixmod", bytes.NewReader(tinyModule), client.OpOptions{})
	must(err)
	js := func(v any) []byte { b, _ := json.Marshal(v); return b }
	return map[string]fixture{
		"GET " + api.SpecPath:   {anyone, func(c *cluster) request { return request{path: api.SpecPath} }},
		"GET " + api.PathHealth: {anyone, func(c *cluster) request { return request{path: api.PathHealth} }},
		"GET /v1/ops":           {anyRole, func(c *cluster) request { return request{path: api.PathOps} }},
		"GET /v1/ops/{name}":    {adminClient, func(c *cluster) request { return request{path: api.PathOps + "/blur"} }},
		"PUT /v1/ops/{name}":    {adminClient, func(c *cluster) request { return request{path: api.PathOps + "/put" + uniq(), body: tinyModule} }},
		"DELETE /v1/ops/{name}": {adminClient, func(c *cluster) request {
			name := "del" + uniq()
			_, err := c.c.AddOp(ctx, name, bytes.NewReader(tinyModule), client.OpOptions{})
			must(err)
			return request{path: api.PathOps + "/" + name}
		}},
		"GET " + api.PathMetrics: {lookers, func(c *cluster) request { return request{path: api.PathMetrics} }},
		// The dashboard's files are open; the data they show is not.
		"GET " + api.PathUI:    {anyone, func(c *cluster) request { return request{path: api.PathUI} }},
		"HEAD " + api.PathUI:   {anyone, func(c *cluster) request { return request{path: api.PathUI + "app.js"} }},
		"GET /v1/workers":      {lookers, func(c *cluster) request { return request{path: api.PathWorkers} }},
		"POST /v1/workers":     {adminWorker, func(c *cluster) request { return request{path: api.PathWorkers, body: regBody} }},
		"GET /v1/workers/{id}": {lookers, func(c *cluster) request { return request{path: api.PathWorkers + "/" + live} }},
		"PUT /v1/workers/{id}": {adminWorker, func(c *cluster) request { return request{path: api.PathWorkers + "/" + live, body: regBody} }},
		"DELETE /v1/workers/{id}": {adminWorker, func(c *cluster) request {
			return request{path: api.PathWorkers + "/" + register()}
		}},
		"POST /v1/workers/{id}/heartbeat": {adminWorker, func(*cluster) request {
			// Nothing else keeps this registration alive: on a slow
			// machine the server may have declared it dead since the
			// last call. Registering it again brings it back.
			_, err := c.c.Update(ctx, live, reg)
			must(err)
			return request{path: api.PathWorkers + "/" + live + "/heartbeat", body: []byte("{}")}
		}},
		"GET /v1/blobs":  {adminClient, func(c *cluster) request { return request{path: api.PathBlobs} }},
		"POST /v1/blobs": {adminClient, func(c *cluster) request { return request{path: api.PathBlobs, body: []byte("upload " + uniq())} }},
		// A module: the one blob a worker may read.
		"GET /v1/blobs/{id}":  {anyRole, func(c *cluster) request { return request{path: api.PathBlobs + "/" + mod.Hash} }},
		"HEAD /v1/blobs/{id}": {anyRole, func(c *cluster) request { return request{path: api.PathBlobs + "/" + mod.Hash} }},
		"DELETE /v1/blobs/{id}": {adminClient, func(c *cluster) request {
			return request{path: api.PathBlobs + "/" + c.put([]byte("to delete "+uniq()))}
		}},
		"POST /v1/datasets": {adminClient, func(c *cluster) request {
			b := []byte("member " + uniq())
			return request{path: api.PathDatasets, body: js(api.DatasetRequest{Members: []api.DatasetMember{
				{Name: "m", Size: int64(len(b)), Blob: c.put(b)}}})}
		}},
		"GET /v1/datasets/{id}": {adminClient, func(c *cluster) request {
			b := []byte("matrix blob")
			info, err := c.c.PutDataset(ctx, []api.DatasetMember{{Name: "m", Size: int64(len(b)), Blob: c.put(b)}})
			must(err)
			return request{path: api.PathDatasets + "/" + info.ID}
		}},
		"GET /v1/jobs": {lookers, func(c *cluster) request { return request{path: api.PathJobs} }},
		"POST /v1/jobs": {adminClient, func(c *cluster) request {
			return request{path: api.PathJobs, body: js(api.JobRequest{Op: "noop", Input: c.put([]byte("matrix blob"))})}
		}},
		"GET /v1/jobs/{id}": {lookers, func(c *cluster) request {
			job := c.submit(api.JobRequest{Op: "noop", Input: c.put([]byte("matrix blob"))})
			return request{path: fmt.Sprintf("%s/%d", api.PathJobs, job.Job)}
		}},
		"GET /v1/jobs/{id}/units": {lookers, func(c *cluster) request {
			job := c.submit(api.JobRequest{Op: "noop", Input: c.put([]byte("matrix blob"))})
			return request{path: fmt.Sprintf("%s/%d/units", api.PathJobs, job.Job)}
		}},
		"POST /v1/jobs/{id}/cancel": {adminClient, func(c *cluster) request {
			// No worker runs checksum: the job stays queued.
			st := c.submit(api.JobRequest{Op: "checksum", Input: c.put([]byte("matrix blob"))})
			return request{path: fmt.Sprintf("%s/%d/cancel", api.PathJobs, st.Job), body: []byte("{}")}
		}},
		"POST /v1/pipelines": {adminClient, func(c *cluster) request {
			return request{path: api.PathPipelines, body: js(api.PipelineRequest{Steps: []api.PipelineStep{
				{Name: "a", JobRequest: api.JobRequest{Op: "noop", Input: c.put([]byte("matrix blob"))}}}})}
		}},
		"GET /v1/pipelines/{id}": {adminClient, func(c *cluster) request {
			pipe, err := c.c.SubmitPipeline(ctx, api.PipelineRequest{Steps: []api.PipelineStep{
				{Name: "a", JobRequest: api.JobRequest{Op: "noop", Input: c.put([]byte("matrix blob"))}}}})
			must(err)
			return request{path: fmt.Sprintf("%s/%d", api.PathPipelines, pipe.Pipeline)}
		}},
		"GET /v1/tokens": {admin, func(c *cluster) request { return request{path: api.PathTokens} }},
		"POST /v1/tokens": {admin, func(c *cluster) request {
			return request{path: api.PathTokens, body: js(api.TokenRequest{Role: api.RoleClient})}
		}},
		"DELETE /v1/tokens/{id}": {admin, func(*cluster) request {
			tok, err := c.c.CreateToken(ctx, api.RoleClient, "")
			must(err)
			return request{path: api.PathTokens + "/" + tok.ID}
		}},
	}
}

// TestRoleMatrix walks every route of the server's route table with every
// kind of credential: a route admits its roles (2xx), refuses other roles
// with 403 and requests without a valid credential with 401 (open routes
// admit everyone). A route without a fixture fails the test, so a new
// route cannot be left out.
func TestRoleMatrix(t *testing.T) {
	c := newCluster(t, nil)
	noop := noopOps(t)
	wk := c.addWorker(1, func(cfg *worker.Config) { cfg.Ops = noop; cfg.Modules = []string{} })
	c.waitWorkers(1)
	creds := credentials(t, c)
	fixture := matrixFixture(t, c, wk)
	routes := server.Routes(c.srv)
	seen := map[string]bool{}
	for _, rt := range routes {
		key := rt.Method + " " + rt.Pattern
		seen[key] = true
		fx, ok := fixture[key]
		if !ok {
			t.Errorf("route %s has no fixture in TestRoleMatrix: add one", key)
			continue
		}
		if got := strings.Join(rt.Roles, " "); got != fx.roles {
			t.Errorf("route %s admits %q, the test's policy %q", key, got, fx.roles)
			continue
		}
		for _, cr := range creds {
			t.Run(key+"/"+cr.name, func(t *testing.T) {
				as := c
				if cr.join != "" {
					as = c.as(client.New(c.srv.URL(), client.WithToken(cr.join)))
				}
				req := fx.mk(as)
				code, body := call(t, c, rt.Method, req, cr.header)
				switch {
				case rt.Roles == nil || slices.Contains(rt.Roles, cr.role):
					if code/100 != 2 {
						t.Errorf("got %d %s, want success", code, body)
					}
				case cr.role == "":
					// A HEAD answer has no body to hold the message.
					if code != http.StatusUnauthorized || rt.Method != http.MethodHead && !strings.Contains(body, cr.msg) {
						t.Errorf("got %d %s, want 401 with %q", code, body, cr.msg)
					}
				default:
					if code != http.StatusForbidden || rt.Method != http.MethodHead && !strings.Contains(body, "a "+cr.role+" credential may not") {
						t.Errorf("got %d %s, want 403", code, body)
					}
				}
			})
		}
	}
	for key := range fixture {
		if !seen[key] {
			t.Errorf("fixture %s names no route", key)
		}
	}
}

func call(t testing.TB, c *cluster, method string, req request, auth string) (int, string) {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), method, c.srv.URL()+req.path, bytes.NewReader(req.body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	resp, err := c.hc.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestWorkerReadsOnlyModules: a worker token reads a module by hash, but
// not another blob, and cannot learn whether a blob exists.
func TestWorkerReadsOnlyModules(t *testing.T) {
	c := newCluster(t, nil)
	tok, err := c.c.CreateToken(t.Context(), api.RoleWorker, "w")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := c.c.AddOp(t.Context(), "tiny", bytes.NewReader(tinyModule), client.OpOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data := c.put([]byte("a client's data"))
	// Removing the operation keeps its module readable: jobs submitted
	// before may still run it.
	if err := c.c.RemoveOp(t.Context(), "tiny"); err != nil {
		t.Fatal(err)
	}
	wc := client.New(c.srv.URL(), client.WithToken(tok.Join))
	var buf bytes.Buffer
	if _, err := wc.Get(t.Context(), mod.Hash, &buf); err != nil || !bytes.Equal(buf.Bytes(), tinyModule) {
		t.Errorf("module: %v", err)
	}
	for _, id := range []string{data, strings.Repeat("0", 64)} {
		if _, err := wc.Get(t.Context(), id, io.Discard); !errors.Is(err, client.ErrForbidden) ||
			!strings.Contains(err.Error(), "only the modules") {
			t.Errorf("blob %s: %v", id, err)
		}
	}
}

// TestTokens: create, list and revoke through the client; a revoked token
// fails at once with a 401 that says so; names are unique and checked.
func TestTokens(t *testing.T) {
	c := newCluster(t, nil)
	ctx := t.Context()
	tok, err := c.c.CreateToken(ctx, api.RoleClient, "ci")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok.Token, api.TokenPrefix) || tok.Fingerprint != api.FormatFingerprint(c.srv.Fingerprint()) ||
		tok.Join != api.JoinToken(tok.Token, c.srv.Fingerprint()) || tok.Role != api.RoleClient || tok.Name != "ci" {
		t.Errorf("created %+v", tok)
	}
	cc := client.New(c.srv.URL(), client.WithToken(tok.Join))
	if _, err := cc.Jobs(ctx, "", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.CreateToken(ctx, api.RoleAdmin, ""); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("a client creating a token: %v", err)
	}
	list, err := c.c.Tokens(ctx)
	if err != nil || len(list) != 1 || list[0].ID != tok.ID || list[0].LastUsed.IsZero() || !list[0].Revoked.IsZero() {
		t.Errorf("tokens %+v, %v", list, err)
	}
	for _, tt := range []struct{ role, name, msg string }{
		{"root", "", `role "root"`},
		{api.RoleClient, "ci", "exists already"},
		{api.RoleClient, "has space", "only letters"},
		{api.RoleClient, "0123456789abcdef", "looks like a token ID"},
		{api.RoleClient, strings.Repeat("n", 65), "1 to 64"},
	} {
		if _, err := c.c.CreateToken(ctx, tt.role, tt.name); err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("create %s %q: %v, want %q", tt.role, tt.name, err, tt.msg)
		}
	}
	if _, err := c.c.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Jobs(ctx, "", 0); !errors.Is(err, client.ErrUnauthorized) || !strings.Contains(err.Error(), "was revoked at") {
		t.Errorf("revoked token: %v", err)
	}
	if _, err := c.c.RevokeToken(ctx, "ci"); !errors.Is(err, client.ErrConflict) ||
		!strings.Contains(err.Error(), `token "ci" is revoked already`) || strings.Contains(err.Error(), "store:") {
		t.Errorf("revoking twice: %v; want 409 saying it is revoked already, without the store's words", err)
	}
	if _, err := c.c.RevokeToken(ctx, "nobody"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("revoking a missing token: %v", err)
	}
	// Tokens and their revocation survive a restart.
	c.stopServer()
	c.startServer()
	if _, err := cc.Jobs(ctx, "", 0); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("revoked token after a restart: %v", err)
	}
}

// TestWorkerToken: a worker registers and runs units with a worker token
// (pinned by a join token); the token cannot submit jobs.
func TestWorkerToken(t *testing.T) {
	c := newCluster(t, nil)
	tok, err := c.c.CreateToken(t.Context(), api.RoleWorker, "node1")
	if err != nil {
		t.Fatal(err)
	}
	c.addWorker(1, func(cfg *worker.Config) { cfg.Token = tok.Join })
	c.waitWorkers(1)
	in := c.put([]byte("payload"))
	if st := c.run(api.JobRequest{Op: "noop", Input: in}); st.State != api.JobDone {
		t.Errorf("job %s: %s", st.State, st.Error)
	}
	wc := client.New(c.srv.URL(), client.WithToken(tok.Join))
	if _, err := wc.Submit(t.Context(), api.JobRequest{Op: "noop", Input: in}); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("a worker submitting: %v", err)
	}
}

// TestSpecDeclaresAuth: every route that needs a credential is in
// openapi.yaml with its 401 and 403 answers.
func TestSpecDeclaresAuth(t *testing.T) {
	var spec struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(api.Spec, &spec); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, nil)
	for _, rt := range server.Routes(c.srv) {
		node, ok := spec.Paths[rt.Pattern][strings.ToLower(rt.Method)]
		if !ok {
			t.Errorf("%s %s is not in openapi.yaml", rt.Method, rt.Pattern)
			continue
		}
		var op struct {
			Security  []map[string][]string `yaml:"security"`
			Responses map[string]any        `yaml:"responses"`
		}
		if err := node.Decode(&op); err != nil {
			t.Errorf("%s %s: %v", rt.Method, rt.Pattern, err)
			continue
		}
		if rt.Roles == nil {
			if op.Security == nil || len(op.Security) != 0 {
				t.Errorf("%s %s is open but openapi.yaml does not say security: []", rt.Method, rt.Pattern)
			}
			continue
		}
		for _, code := range []string{"401", "403"} {
			if _, ok := op.Responses[code]; !ok {
				t.Errorf("%s %s: openapi.yaml declares no %s", rt.Method, rt.Pattern, code)
			}
		}
	}
}

// TestWorkerTokenOwnsItsWorker: a worker token speaks only for the workers
// it registered; another worker token gets 403 on them, an admin does not.
func TestWorkerTokenOwnsItsWorker(t *testing.T) {
	c := newCluster(t, nil)
	mine, err := c.c.CreateToken(t.Context(), api.RoleWorker, "mine")
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.c.CreateToken(t.Context(), api.RoleWorker, "other")
	if err != nil {
		t.Fatal(err)
	}
	c.addWorker(1, func(cfg *worker.Config) { cfg.Token = mine.Join })
	c.waitWorkers(1)
	ws, err := c.c.Workers(t.Context())
	if err != nil || len(ws) != 1 {
		t.Fatalf("workers: %v %v", ws, err)
	}
	id := ws[0].ID
	hb := request{path: api.PathWorkers + "/" + id + "/heartbeat", body: []byte("{}")}
	if code, body := call(t, c, http.MethodPost, hb, "Bearer "+other.Token); code != http.StatusForbidden || !strings.Contains(body, "another token") {
		t.Errorf("another worker token's heartbeat: %d %s", code, body)
	}
	del := request{path: api.PathWorkers + "/" + id}
	if code, body := call(t, c, http.MethodDelete, del, "Bearer "+other.Token); code != http.StatusForbidden {
		t.Errorf("another worker token's deregistration: %d %s", code, body)
	}
	if code, body := call(t, c, http.MethodPost, hb, "Bearer "+mine.Token); code != http.StatusOK {
		t.Errorf("the owner's heartbeat: %d %s", code, body)
	}
	if code, body := call(t, c, http.MethodPost, hb, "Bearer "+api.Token(testKey)); code != http.StatusOK {
		t.Errorf("the admin's heartbeat: %d %s", code, body)
	}
	if ws, _ := c.c.Workers(t.Context()); len(ws) != 1 {
		t.Errorf("%d workers after the refused deregistration, want 1", len(ws))
	}
}

// fakePeer listens on addr like a worker's data plane but answers every
// channel with bytes that are no braid handshake. It counts channels and
// the bytes the server sent on them.
type fakePeer struct {
	ln    net.Listener
	conns atomic.Int64
	bytes atomic.Int64
}

func newFakePeer(t *testing.T, addr string) *fakePeer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakePeer{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				_, _ = c.Write(bytes.Repeat([]byte{0xAB}, 512))
				n, _ := io.Copy(io.Discard, c)
				f.bytes.Add(n)
			}()
		}
	}()
	return f
}

// TestWorkerAddressesOwned: a worker token may register only addresses
// its connection could own: the server refuses, without dialing, an
// address that is neither the registration's source nor inside
// --worker-networks. Where it does dial (an allowed network, or the
// cluster key's holder), a peer that does not answer as a braid worker
// gets the first handshake message and nothing more.
func TestWorkerAddressesOwned(t *testing.T) {
	const helloLen = 6 + 48 // transport/internal/wire.HelloLen
	c := newCluster(t, func(cfg *server.Config) { cfg.DialTimeout = 3 * time.Second })
	tok, err := c.c.CreateToken(t.Context(), api.RoleWorker, "w")
	if err != nil {
		t.Fatal(err)
	}
	other := newFakePeer(t, "127.0.0.2:0") // another host's service, as far as the rule knows
	reg := func(addr string) request {
		b, _ := json.Marshal(api.Register{Name: "x", Addresses: []string{addr}, Threads: 1, Ops: []string{"noop"}})
		return request{path: api.PathWorkers, body: b}
	}
	code, body := call(t, c, http.MethodPost, reg(other.ln.Addr().String()), "Bearer "+tok.Token)
	if code != http.StatusForbidden || !strings.Contains(body, "--worker-networks") || !strings.Contains(body, "127.0.0.1") {
		t.Errorf("worker token registering another address: %d %s; want 403 naming the source and --worker-networks", code, body)
	}
	if n := other.conns.Load(); n != 0 {
		t.Errorf("the server opened %d channels to an address the worker could not own", n)
	}
	code, body = call(t, c, http.MethodPost, reg("localhost:7"), "Bearer "+tok.Token)
	if code != http.StatusForbidden || !strings.Contains(body, "IP addresses") {
		t.Errorf("worker token registering a host name: %d %s; want 403", code, body)
	}

	// The source address itself may be dialed (negative control: the rule
	// is not "refuse everything"); the fake peer gets the hello only.
	own := newFakePeer(t, "127.0.0.1:0")
	code, body = call(t, c, http.MethodPost, reg(own.ln.Addr().String()), "Bearer "+tok.Token)
	if code == http.StatusCreated || code == http.StatusForbidden {
		t.Errorf("registering a non-braid peer at the source address: %d %s; want a dial failure", code, body)
	}
	// The cluster key's holder is trusted with any address.
	code, _ = call(t, c, http.MethodPost, reg(other.ln.Addr().String()), "Bearer "+api.Token(testKey))
	if code == http.StatusCreated || code == http.StatusForbidden {
		t.Errorf("admin registering a non-braid peer: %d; want a dial failure", code)
	}
	for _, f := range []*fakePeer{own, other} {
		if !testwait.Until(5*time.Second, func() bool { return f.conns.Load() > 0 && f.bytes.Load() >= helloLen }) {
			t.Fatalf("the fake peer at %s saw %d channels and %d bytes", f.ln.Addr(), f.conns.Load(), f.bytes.Load())
		}
		// Each channel got one hello; none got more.
		if got, most := f.bytes.Load(), f.conns.Load()*helloLen; got > most {
			t.Errorf("a peer that is no braid worker at %s got %d bytes on %d channels, more than a hello each (%d)",
				f.ln.Addr(), got, f.conns.Load(), most)
		}
	}
}

// TestWorkerNetworks: with --worker-networks, a worker token may register
// addresses inside them besides its source address.
func TestWorkerNetworks(t *testing.T) {
	c := newCluster(t, func(cfg *server.Config) {
		cfg.WorkerNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	tok, err := c.c.CreateToken(t.Context(), api.RoleWorker, "w")
	if err != nil {
		t.Fatal(err)
	}
	c.addWorker(1, func(cfg *worker.Config) {
		cfg.Token = tok.Join
		cfg.Listen = []string{"127.0.0.3:0"}
	})
	c.waitWorkers(1)
}
