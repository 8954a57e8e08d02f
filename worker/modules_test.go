package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/testwait"
)

// emptyCommand is the smallest WASI command: a memory and a _start that
// returns.
var emptyCommand = []byte{
	0, 'a', 's', 'm', 1, 0, 0, 0,
	1, 4, 1, 0x60, 0, 0, // type section: func()
	3, 2, 1, 0, // function section: one of type 0
	5, 3, 1, 0, 1, // memory section: one memory of 1 page
	7, 19, 2, // export section: 2 exports
	6, 'm', 'e', 'm', 'o', 'r', 'y', 2, 0,
	6, '_', 's', 't', 'a', 'r', 't', 0, 0,
	10, 4, 1, 2, 0, 0x0b, // code section: an empty body
}

// TestPrefetch checks that a worker loads a module the server lists
// before any of its units arrives.
func TestPrefetch(t *testing.T) {
	sum := sha256.Sum256(emptyCommand)
	hash := hex.EncodeToString(sum[:])
	var downloads atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case api.PathOps:
			json.NewEncoder(rw).Encode(api.OpList{Ops: []api.OpInfo{
				{Name: "noop", Kind: api.OpBuiltin},
				{Name: "empty", Kind: api.OpModule, Hash: hash, Size: int64(len(emptyCommand)), Added: time.Now()},
			}})
		case api.PathBlobs + "/" + hash:
			downloads.Add(1)
			rw.Write(emptyCommand)
		default:
			http.NotFound(rw, r)
		}
	}))
	defer srv.Close()
	cfg := Config{ModuleDir: t.TempDir(), ModuleCache: 1 << 20, MaxModule: 1 << 20}
	m, err := newModules(&cfg, []*client.Client{client.New(srv.URL, client.WithInsecureHTTP())})
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.prefetch(ctx)
	}()
	testwait.For(t, "the module to be loaded", 10*time.Second, func() bool {
		_, ok := m.engine.Lookup(hash)
		return ok
	})
	cancel()
	<-done
	if n := downloads.Load(); n != 1 {
		t.Errorf("downloaded %d times, want 1", n)
	}
}
