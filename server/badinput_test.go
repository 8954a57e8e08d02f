package server_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/worker"
)

// TestBadInputKeepsServing goes through the bad inputs a user may give
// (an unknown operation, a missing data id, a corrupt image, a tile size
// of zero, a worker without the cluster key) on one server. Each gets a
// clear error, and after each the same server, with the same worker,
// still runs a tiled blur to the right output.
func TestBadInputKeepsServing(t *testing.T) {
	c := newCluster(t, nil)
	c.addWorker(2, nil)
	c.waitWorkers(1)
	img := ops.SamplePNG(96, 64)
	in := c.put(img)
	want := reference(t, ops.Blur(), img, nil)
	missing := strings.Repeat("ab", 32)

	// submitFails submits req and checks the error's class and message.
	submitFails := func(t *testing.T, req api.JobRequest, class error, msg string) {
		t.Helper()
		st, err := c.c.Submit(t.Context(), req)
		if !errors.Is(err, class) || !strings.Contains(err.Error(), msg) {
			t.Errorf("submit %+v: job %d, error %v; want %v saying %q", req, st.Job, err, class, msg)
		}
	}
	tests := []struct {
		name string
		bad  func(t *testing.T)
	}{
		{"unknown operation", func(t *testing.T) {
			submitFails(t, api.JobRequest{Op: "bluur", Input: in}, client.ErrBadRequest, `unknown operation "bluur"; known: blur,`)
		}},
		{"missing data id", func(t *testing.T) {
			submitFails(t, api.JobRequest{Op: "blur", Input: missing}, client.ErrNotFound,
				"no blob "+missing+" on this server; upload the data first")
		}},
		{"data id that is not one", func(t *testing.T) {
			submitFails(t, api.JobRequest{Op: "blur", Input: "photo.png"}, client.ErrBadRequest, `input "photo.png" is not a blob id`)
		}},
		{"not an image", func(t *testing.T) {
			submitFails(t, api.JobRequest{Op: "blur", Input: c.put([]byte("plain text, not a picture")), Tile: api.Tile{W: 32, H: 32}},
				client.ErrBadRequest, "not a PNG, JPEG or GIF image")
		}},
		{"corrupt image, tiled", func(t *testing.T) {
			// The server decodes the image to cut tiles: the submission fails.
			submitFails(t, api.JobRequest{Op: "blur", Input: c.put(img[:len(img)/2]), Tile: api.Tile{W: 32, H: 32}},
				client.ErrBadRequest, "corrupt")
		}},
		{"corrupt image, one unit", func(t *testing.T) {
			// The unit carries the file: the worker finds the damage, and
			// the job fails naming the unit and the cause.
			st := c.run(api.JobRequest{Op: "blur", Input: c.put(img[:len(img)/2])})
			if st.State != api.JobFailed || !strings.Contains(st.Error, "unit 0 failed on worker w1") ||
				!strings.Contains(st.Error, "blur: corrupt png image") {
				t.Errorf("job %s: %q; want failed naming unit 0 and the corrupt PNG", st.State, st.Error)
			}
		}},
		{"tile size of zero", func(t *testing.T) {
			code, body := rawCall(t, c, "POST", api.PathJobs, `{"op":"blur","input":"`+in+`","tile":"0x0"}`, "")
			var e api.Error
			if err := json.Unmarshal([]byte(body), &e); code != 400 || err != nil ||
				!strings.Contains(e.Message, `tile "0x0": width and height must be at least 1 pixel`) {
				t.Errorf("tile 0x0: %d %s", code, body)
			}
			submitFails(t, api.JobRequest{Op: "blur", Input: in, Tile: api.Tile{W: 0, H: 32}}, client.ErrBadRequest,
				"width and height must be at least 1 pixel")
		}},
		{"worker without the cluster key", func(t *testing.T) {
			// Registering without the key's token is refused at the door.
			code, body := rawCall(t, c, "POST", api.PathWorkers, `{"addresses":["127.0.0.1:7420"],"threads":1,"ops":["blur"]}`, "none")
			if code != 401 || !strings.Contains(body, "no credential") {
				t.Errorf("registration without a token: %d %s", code, body)
			}
			// A worker holding another key gives up with a clear error.
			bad := c.addWorker(1, func(cfg *worker.Config) { cfg.Key = []byte("some other cluster's key") })
			select {
			case err := <-bad.done:
				bad.done <- err
				if err == nil || !strings.Contains(err.Error(), "cluster key differs") {
					t.Errorf("worker with another key: Run = %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a worker with another key still running after 10s")
			}
			// And a worker without one cannot even start.
			if _, err := worker.New(worker.Config{Servers: []string{c.srv.URL()}, Logger: testLogger()}); err == nil ||
				!strings.Contains(err.Error(), "Key is empty") {
				t.Errorf("worker without a key: New = %v", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.bad(t)
			// The server still serves, with the worker it had.
			h, err := c.c.Health(t.Context())
			if err != nil || h.Workers != 1 {
				t.Fatalf("health after the bad input: %+v, %v; want 1 live worker", h, err)
			}
			st := c.run(api.JobRequest{Op: "blur", Input: in, Tile: api.Tile{W: 32, H: 32}})
			if st.State != api.JobDone || st.Units.Done != 6 {
				t.Fatalf("job after the bad input: %s, %+v: %s", st.State, st.Units, st.Error)
			}
			if !bytes.Equal(c.get(st.Output), want) {
				t.Error("job after the bad input: output differs from the single-unit blur")
			}
		})
	}
}
