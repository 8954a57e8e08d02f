package worker

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/internal/testwait"
)

// fakeServer answers a worker's control requests; it fails the first
// figures update with a 500.
type fakeServer struct {
	mu      sync.Mutex
	updates int // PUT requests seen
	threads int // threads of the last update accepted
	beats   int

	noFail     bool          // accept the first update too
	onRegister func(*Worker) // called while answering the registration
	w          *Worker       // the worker under test, for onRegister
}

func (f *fakeServer) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reply := func(code int, v any) {
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(code)
		json.NewEncoder(rw).Encode(v)
	}
	reg := api.Registration{Worker: "w1", HeartbeatMillis: 100, TimeoutMillis: 1000}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == api.PathWorkers:
		if f.onRegister != nil {
			f.onRegister(f.w)
		}
		reply(http.StatusOK, reg)
	case r.Method == http.MethodPut && r.URL.Path == api.PathWorkers+"/w1":
		var in api.Register
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			reply(http.StatusBadRequest, api.Error{Message: err.Error()})
			return
		}
		if f.updates++; f.updates == 1 && !f.noFail {
			reply(http.StatusInternalServerError, api.Error{Message: "database is locked"})
			return
		}
		f.threads = in.Threads
		reply(http.StatusOK, reg)
	case r.Method == http.MethodPost && r.URL.Path == api.PathWorkers+"/w1/heartbeat":
		f.beats++
		reply(http.StatusOK, reg)
	case r.Method == http.MethodDelete:
		rw.WriteHeader(http.StatusNoContent)
	default:
		reply(http.StatusNotFound, api.Error{Message: "no such endpoint"})
	}
}

func (f *fakeServer) state() (updates, threads, beats int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.updates, f.threads, f.beats
}

// TestAnnounceRetries: an announcement of new figures that the server
// fails is sent again soon, not at the next figures tick (here an hour
// away), and meanwhile the heartbeats keep the server's interval.
func TestAnnounceRetries(t *testing.T) {
	f := &fakeServer{}
	w, url := runWorker(t, f)
	testwait.For(t, "registration", 10*time.Second, func() bool { return w.IDs()[url] == "w1" })
	if err := w.SetThreads(3); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the new threads after a failed announcement", 10*time.Second, func() bool { _, th, _ := f.state(); return th == 3 })
	if updates, _, _ := f.state(); updates < 2 {
		t.Errorf("%d updates, want the failed one and a retry", updates)
	}
	// Heartbeats every 100 ms: a failed update must not leave the worker
	// without the interval (it would send one every 10 ms).
	_, _, before := f.state()
	time.Sleep(500 * time.Millisecond)
	if _, _, after := f.state(); after-before > 15 {
		t.Errorf("%d heartbeats in 500 ms at a 100 ms interval", after-before)
	}
}

// TestSetThreadsWhileRegistering: threads changed while the registration
// is on its way (so the server registered the old figures) are announced
// at once, not at the next figures tick an hour away. It failed when the
// announce loop took the SetThreads channel only after registering.
func TestSetThreadsWhileRegistering(t *testing.T) {
	f := &fakeServer{noFail: true, onRegister: func(w *Worker) {
		if err := w.SetThreads(3); err != nil {
			t.Error(err)
		}
	}}
	runWorker(t, f)
	testwait.For(t, "the threads set during registration", 10*time.Second, func() bool { _, th, _ := f.state(); return th == 3 })
}

// runWorker runs a worker of 2 threads against f until the test ends, with
// a 20 ms retry interval and figures ticks an hour apart, and returns it
// with f's URL.
func runWorker(t *testing.T, f *fakeServer) (*Worker, string) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	w, err := New(Config{Servers: []string{srv.URL}, Key: testKey, InsecureHTTP: true, Threads: 2, Logger: quiet(),
		RetryInterval: 20 * time.Millisecond, FiguresInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f.w = w
	runForTest(t, w)
	return w, srv.URL
}
