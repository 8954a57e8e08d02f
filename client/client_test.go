package client

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/braid-hpc/braid/api"
)

func TestURLScheme(t *testing.T) {
	for _, tt := range []struct {
		in       string
		insecure bool
		want     string
	}{
		{"10.0.0.1:7400", false, "https://10.0.0.1:7400"},
		{"http://10.0.0.1:7400/", false, "https://10.0.0.1:7400"},
		{"https://h:1", false, "https://h:1"},
		{"h:1", true, "http://h:1"},
		{"https://h:1", true, "http://h:1"},
	} {
		var opts []Option
		if tt.insecure {
			opts = append(opts, WithInsecureHTTP())
		}
		if got := New(tt.in, opts...).URL(); got != tt.want {
			t.Errorf("New(%q, insecure %v).URL() = %q, want %q", tt.in, tt.insecure, got, tt.want)
		}
	}
}

func TestErrorsCarryTheMessage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/jobs/9":
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(api.Error{Message: "no job 9 on this server"})
		default:
			http.Error(w, "plain text", http.StatusTeapot)
		}
	}))
	defer srv.Close()
	c := New(strings.TrimPrefix(srv.URL, "http://"), WithInsecureHTTP()) // no scheme: the option's http
	_, err := c.Status(t.Context(), 9)
	if !errors.Is(err, ErrNotFound) || StatusOf(err) != 404 || err.Error() != "status of job 9: no job 9 on this server (HTTP 404)" {
		t.Errorf("404: %v", err)
	}
	_, err = c.Jobs(t.Context(), "", 0)
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusTeapot || e.Message != "plain text" || errors.Is(err, ErrNotFound) {
		t.Errorf("non-API error body: %#v", err)
	}
	if StatusOf(errors.New("network down")) != 0 {
		t.Error("StatusOf a network error is not 0")
	}
}

// TestWait: Wait follows a job to its end, reports progress, retries after
// a server error and asks the server to hold each answer.
func TestWait(t *testing.T) {
	var polls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("wait") == "" {
			t.Errorf("poll without wait=: %s", r.URL)
		}
		n := polls.Add(1)
		st := api.JobStatus{Job: 3, State: api.JobRunning, Units: api.UnitCounts{Total: 4, Done: int(n)}}
		switch n {
		case 2:
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case 4:
			st.State, st.Output = api.JobDone, "out"
		}
		json.NewEncoder(w).Encode(st)
	}))
	defer srv.Close()
	var seen []int
	st, err := New(srv.URL, WithInsecureHTTP()).Wait(t.Context(), 3, func(s api.JobStatus) { seen = append(seen, s.Units.Done) })
	if err != nil || st.State != api.JobDone || st.Output != "out" {
		t.Fatalf("Wait = %+v, %v", st, err)
	}
	if len(seen) != 3 || seen[2] != 4 {
		t.Errorf("progress saw %v", seen)
	}
}

func TestPutGet(t *testing.T) {
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost:
			body, _ = io.ReadAll(r.Body)
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(api.BlobInfo{ID: "abc", Size: int64(len(body))})
		case http.MethodGet:
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "short") // fewer bytes than announced
		}
	}))
	defer srv.Close()
	c := New(srv.URL, WithInsecureHTTP())
	info, err := c.PutInfo(t.Context(), strings.NewReader("some data"))
	if err != nil || info.ID != "abc" || info.Size != 9 || string(body) != "some data" {
		t.Errorf("PutInfo = %+v, %v (server got %q)", info, err, body)
	}
	var sb strings.Builder
	if _, err := c.Get(t.Context(), "abc", &sb); err == nil {
		t.Error("a truncated download is not an error")
	}
}
