package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/server"
)

// rawCall sends a request with the cluster's bearer token (unless token
// is "none") and returns the status and body.
func rawCall(t testing.TB, c *cluster, method, path, body, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, c.srv.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	switch token {
	case "":
		req.Header.Set("Authorization", "Bearer "+api.Token(testKey))
	case "none":
	default:
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestSubmitErrors: invalid job requests get a 4xx with a JSON message
// that says what to fix.
func TestSubmitErrors(t *testing.T) {
	c := newCluster(t, nil)
	in := c.put(ops.SamplePNG(32, 32))
	missing := strings.Repeat("ab", 32)
	tests := []struct {
		name string
		body string
		code int
		msg  string
	}{
		{"unknown op", `{"op":"bluur","input":"` + in + `"}`, 400, `unknown operation "bluur"; known: blur,`},
		{"missing input", `{"op":"blur","input":"` + missing + `"}`, 404, "no blob " + missing + " on this server; upload the data first"},
		{"not a blob id", `{"op":"blur","input":"photo.png"}`, 400, `input "photo.png" is not a blob id`},
		{"tile 0x0", `{"op":"blur","input":"` + in + `","tile":"0x0"}`, 400, "width and height must be at least 1 pixel"},
		{"tile on checksum", `{"op":"checksum","input":"` + in + `","tile":"8x8"}`, 400, "does not take a tile size"},
		{"bad param", `{"op":"blur","input":"` + in + `","params":{"radius":"0"}}`, 400, `radius="0": want a whole number from 1 to 200`},
		{"unknown param", `{"op":"blur","input":"` + in + `","params":{"radus":"3"}}`, 400, `unknown parameter "radus"`},
		{"bad policy", `{"op":"blur","input":"` + in + `","policy":"fastest"}`, 400, `unknown policy "fastest"`},
		{"in_flight", `{"op":"blur","input":"` + in + `","in_flight":5000}`, 400, "in_flight 5000"},
		{"unknown field", `{"op":"blur","input":"` + in + `","tiles":"8x8"}`, 400, `unknown field "tiles"`},
		{"not JSON", `op=blur`, 400, "job request: invalid character"},
		{"empty", ``, 400, "empty body"},
		{"not an image", `{"op":"blur","input":"` + c.put([]byte("hello")) + `"}`, 400, "not a PNG, JPEG or GIF image"},
		{"too large", `{"op":"blur","input":"` + strings.Repeat(" ", 2<<20) + `"}`, 413, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := rawCall(t, c, "POST", api.PathJobs, tt.body, "")
			var e api.Error
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("body is not an API error: %q", body)
			}
			if code != tt.code || !strings.Contains(e.Message, tt.msg) {
				t.Errorf("got %d %q, want %d with %q", code, e.Message, tt.code, tt.msg)
			}
		})
	}
	// The client carries the message and the status.
	_, err := c.c.Submit(t.Context(), api.JobRequest{Op: "nope", Input: in})
	if !errors.Is(err, client.ErrBadRequest) || !strings.Contains(err.Error(), `unknown operation "nope"`) {
		t.Errorf("client error %v", err)
	}
	_, err = c.c.Status(t.Context(), 99)
	if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "no job 99") {
		t.Errorf("status of a missing job: %v", err)
	}
}

// TestHTTP checks the routing, auth and error shape of the API.
func TestHTTP(t *testing.T) {
	c := newCluster(t, func(cfg *server.Config) { cfg.MaxBlob = 1000 })
	tests := []struct {
		name, method, path, body, token string
		code                            int
		msg                             string
	}{
		{"health needs no token", "GET", api.PathHealth, "", "none", 200, `"status":"ok"`},
		{"spec needs no token", "GET", api.SpecPath, "", "none", 200, "openapi: 3.0"},
		{"no token", "GET", api.PathJobs, "", "none", 401, "no credential"},
		{"wrong token", "GET", api.PathJobs, "", api.Token([]byte("another key")), 401, "not derived from its cluster key"},
		{"ops", "GET", api.PathOps, "", "", 200, `"name":"blur"`},
		{"unknown path", "GET", "/v2/things", "", "", 404, "no endpoint /v2/things"},
		{"wrong method", "DELETE", api.PathJobs, "", "", 405, "does not take DELETE; it takes GET, POST"},
		{"bad job id", "GET", api.PathJobs + "/x1", "", "", 400, `is not a job id`},
		{"missing job", "GET", api.PathJobs + "/42", "", "", 404, "no job 42"},
		{"bad wait", "GET", api.PathJobs + "/42?wait=soon", "", "", 400, "wait="},
		{"bad state filter", "GET", api.PathJobs + "?state=paused", "", "", 400, "state="},
		{"bad blob id", "GET", api.PathBlobs + "/abc", "", "", 400, "not a blob id"},
		{"missing blob", "GET", api.PathBlobs + "/" + strings.Repeat("0", 64), "", "", 404, "no blob"},
		{"upload too large", "POST", api.PathBlobs, strings.Repeat("x", 1001), "", 413, "limit of 1000 B for one upload"},
		{"missing worker", "GET", api.PathWorkers + "/w9", "", "", 404, "no worker w9"},
		{"heartbeat unknown", "POST", api.PathWorkers + "/w9/heartbeat", "{}", "", 404, "register again"},
		{"register wildcard", "POST", api.PathWorkers, `{"addresses":["0.0.0.0:7420"],"threads":1,"ops":["blur"]}`, "", 400, "not a wildcard"},
		{"register no threads", "POST", api.PathWorkers, `{"addresses":["127.0.0.1:7420"],"threads":0,"ops":["blur"]}`, "", 400, "threads 0"},
		{"register unreachable", "POST", api.PathWorkers, `{"addresses":["127.0.0.1:1"],"threads":1,"ops":["blur"]}`, "", 502, "cannot reach the worker's data plane"},
		{"cancel missing", "POST", api.PathJobs + "/7/cancel", "", "", 404, "no job 7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := rawCall(t, c, tt.method, tt.path, tt.body, tt.token)
			if code != tt.code || !strings.Contains(body, tt.msg) {
				t.Errorf("%s %s: got %d %q, want %d with %q", tt.method, tt.path, code, body, tt.code, tt.msg)
			}
			if code >= 400 {
				var e api.Error
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Message == "" {
					t.Errorf("error body is not {\"error\": ...}: %q", body)
				}
			}
		})
	}
}

// TestBlobs: upload, download (with ranges), list, and delete only when no
// unfinished job uses the blob.
func TestBlobs(t *testing.T) {
	c := newCluster(t, nil)
	data := bytes.Repeat([]byte("0123456789"), 1000)
	id := c.put(data)
	if again := c.put(data); again != id {
		t.Errorf("same bytes, ids %s and %s", id, again)
	}
	if got := c.get(id); !bytes.Equal(got, data) {
		t.Error("download differs from upload")
	}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", c.srv.URL()+api.PathBlobs+"/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+api.Token(testKey))
	req.Header.Set("Range", "bytes=10-19")
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	part, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent || string(part) != "0123456789" {
		t.Errorf("range: %d %q", resp.StatusCode, part)
	}
	list, err := c.c.Blobs(t.Context())
	if err != nil || len(list) != 1 || list[0].ID != id || list[0].Size != int64(len(data)) {
		t.Errorf("list: %+v %v", list, err)
	}
	// A queued job (no worker) holds its input.
	st := c.submit(api.JobRequest{Op: "noop", Input: id})
	if st.State != api.JobQueued || !strings.Contains(st.Error, "no live worker runs operation") {
		t.Errorf("job without workers: %s %q", st.State, st.Error)
	}
	if err := c.c.DeleteBlob(t.Context(), id); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "used by unfinished jobs") {
		t.Errorf("deleting a blob in use: %v", err)
	}
	if _, err := c.c.Cancel(t.Context(), st.Job); err != nil {
		t.Fatal(err)
	}
	if err := c.c.DeleteBlob(context.Background(), id); err != nil {
		t.Errorf("deleting: %v", err)
	}
	if _, err := c.c.Get(t.Context(), id, io.Discard); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get after delete: %v", err)
	}
}
