package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/store"
	"github.com/braid-hpc/braid/transport"
)

// Config configures a Server. Data and Key are required; every other
// field's zero value works.
type Config struct {
	// Listen is the host:port of the HTTP control API. Empty means
	// "127.0.0.1:7400"; port 0 picks a free port (see Server.URL).
	Listen string
	// Data is the directory of the blobs (Data/blobs, unless Blobs says
	// otherwise) and, unless DB names another, the job database
	// (Data/jobs.db). A server started again on the same directory
	// resumes the jobs it had accepted. Required.
	Data string
	// DB is the metadata store's URL (braid server --db):
	// "sqlite:PATH", a bare path, or "postgres://USER@HOST:PORT/DB".
	// Empty means SQLite in Data/jobs.db.
	DB string
	// Blobs is where the blobs are kept: "dir:PATH" (a directory) or
	// "s3://BUCKET/PREFIX?endpoint=https://HOST:PORT&region=R" (an
	// S3-compatible object store; see store.OpenBlobStore). Empty means
	// the directory Data/blobs.
	Blobs string
	// BlobCache bounds the read-through cache of an S3 blob store, in
	// Data/blobcache. Zero means 2 GiB; negative means no cache.
	BlobCache int64
	// Key is the cluster key. It authenticates the data-plane sessions
	// the server opens to workers; on the control API, api.Token(Key) is
	// the admin credential and api.CertProof(Key, ...) proves the TLS
	// certificate to clients that hold the key. Required.
	Key []byte
	// TLSCert and TLSKey are PEM files of the control API's certificate
	// and its private key. Empty means a self-signed ECDSA P-256
	// certificate generated on the first start and kept in Data/tls.
	TLSCert, TLSKey string
	// InsecureHTTP serves the control API over plain HTTP: every
	// credential and answer can be read, replayed and changed on the
	// way. Only for a trusted network or a measurement. False means
	// HTTPS.
	InsecureHTTP bool
	// Ops are the operations jobs may name. Nil means ops.Builtin().
	Ops *ops.Registry
	// Transport configures the sessions the server dials to workers. Its
	// Key and a nil Logger are set from this Config. Nil means the
	// transport's defaults.
	Transport *transport.Config

	// HeartbeatInterval is how often workers are told to send a
	// heartbeat. Zero means 1s. In a large cluster the server asks for
	// fewer (see MaxHeartbeats).
	HeartbeatInterval time.Duration
	// WorkerTimeout declares a worker dead, and runs its units
	// elsewhere, when it sent no heartbeat for this long. Zero means five
	// heartbeat intervals. It grows with the interval the server asks
	// for.
	WorkerTimeout time.Duration
	// MaxHeartbeats bounds the heartbeats a second the server asks of
	// all its workers together: with more workers than MaxHeartbeats
	// times HeartbeatInterval, each is asked to beat less often (and
	// given a proportionally longer WorkerTimeout), so that 1,000
	// workers cost a server 250 requests a second, not 1,000. Zero means
	// 250. A dead worker is still noticed by its data-plane session
	// within DataPlaneTimeout.
	MaxHeartbeats int
	// DataPlaneTimeout declares a worker dead, and runs its units
	// elsewhere, when every path of its data-plane session has been down
	// this long (a cut network or a stopped worker falls silent for
	// Transport's PathTimeout first), whatever its heartbeats say. It is
	// the worker sessions' SessionTimeout, unless Transport sets one.
	// Zero means 1.5s: with the default PathTimeout of 0.5s, a silent
	// worker is noticed within 2s. A worker whose process ended (killed,
	// crashed) is noticed sooner, without waiting for it: its kernel
	// closes the channels at once and refuses the server's redials, which
	// ends the session a transport ReconnectInterval (0.1s) later.
	DataPlaneTimeout time.Duration
	// ForgetWorkers is how long a dead worker stays listed (GET
	// /v1/workers, braid workers, the dashboard, and a braid_worker_up 0
	// series) after it was last seen; then the server forgets it, so
	// that an alert on up == 0 clears. A worker that registers anew with
	// the name and addresses of a dead one (the same worker, restarted)
	// replaces it at once. Zero means 10 minutes; negative keeps dead
	// workers until deleted (DELETE /v1/workers/{id}, braid workers
	// --forget).
	ForgetWorkers time.Duration
	// DialTimeout bounds opening a session to a worker's data plane when
	// it registers. Zero means 10s.
	DialTimeout time.Duration
	// InFlight is how many units a stream holds at once for jobs that do
	// not say. Zero means 16: enough queued at the worker that its
	// threads do not wait for the next unit while results travel back and
	// the server books them. On a two-core host shared with the server,
	// 2 lent threads computed 0.75 of their time at 2 in flight, 0.89 at
	// 8 and 0.93 at 16 (braid bench --only fraction).
	InFlight int
	// MaxThreads bounds the threads (and so streams) one worker may
	// lend. Zero means 1024.
	MaxThreads int
	// WorkerNetworks are the networks whose addresses a worker that
	// registers with a worker token may give besides the address it
	// connected from (braid server --worker-networks). The server dials
	// a worker's data plane only at addresses the registering connection
	// could own: its own source address, or one inside these networks.
	// Holders of the cluster key and admin tokens may give any address.
	// Nil allows only the source address.
	WorkerNetworks []netip.Prefix
	// MaxBlob bounds the size of one upload (braid server --max-upload);
	// a larger one is refused with 413. Zero means 16 GiB.
	MaxBlob int64
	// MaxData bounds the bytes of all stored blobs (braid server
	// --max-data): an upload that would pass it, and a job submitted
	// while it is reached, are refused with 507. Jobs already accepted
	// still store their results and outputs, so leave room for them.
	// Zero means no limit but the disk's.
	MaxData int64
	// Retain is how long a job's output is kept after the job ends
	// (braid server --retain); then a sweep removes it, the job shows it
	// as expired and fetching it answers 410 Gone. Zero means outputs
	// are kept until deleted. A job's intermediate blobs (unit results,
	// tile data) are removed when it ends, whatever Retain says.
	Retain time.Duration
	// MaxRequest bounds a JSON request body. Zero means 1 MiB.
	MaxRequest int64
	// MaxConns bounds the control API connections open at once; more wait
	// in the kernel's backlog until one closes, so a flood of idle
	// connections cannot take the descriptors running jobs need. Zero
	// means a quarter of the process's file descriptor limit, between 64
	// and 4096.
	MaxConns int
	// MaxModule bounds the size of an uploaded WebAssembly module. Zero
	// means 64 MiB.
	MaxModule int64
	// UnitMem, UnitTimeout and UnitOutput are the limits of a module's
	// unit for jobs that do not say: linear memory, run time and output
	// bytes. Zero means 256 MiB, 60s and 256 MiB.
	UnitMem     int64
	UnitTimeout time.Duration
	UnitOutput  int64
	// MaxTries is how many times a unit may fail before its job fails,
	// for jobs that do not say. Zero means 3.
	MaxTries int
	// Durable makes unit results and every database commit reach stable
	// storage before they count, so a power loss loses nothing. Zero
	// means uploads and job outputs are synced, while unit results and
	// commits survive a crash of the process but not of the machine;
	// after a power loss a unit whose result was lost runs again.
	Durable bool

	// Name names the server among those that share one database
	// (PostgreSQL): its lease and the jobs it owns carry it. It must be
	// unique among them and the same across restarts (a restarted
	// server takes its jobs back at once). Empty means HOST:PORT, the
	// host name and the port the control API listens on.
	Name string
	// TakeoverAfter is how long the jobs of a server that stopped
	// renewing its lease (it died, stalled or lost the database) wait
	// before another server sharing the database takes them over. It
	// renews every third of it. Zero means 10 seconds.
	TakeoverAfter time.Duration
	// SyncInterval is how often a server sharing its database looks for
	// jobs to take over, for jobs canceled or ended through another
	// server, and for tokens and operations added elsewhere. Zero means
	// TakeoverAfter/10, at most one second.
	SyncInterval time.Duration

	// Logger receives lifecycle events. Nil means slog.Default().
	Logger *slog.Logger

	// wrapState and wrapResults, set by tests, wrap the writes of unit
	// results and job ends and the store of unit results: a seam for
	// injecting faults such as a full disk.
	wrapState   func(store.Jobs) store.Jobs
	wrapResults func(store.Blobs) store.Blobs
	// counted, set by tests, is called when the scheduler counted a
	// unit's result, before the result is recorded: a seam to widen the
	// window between the two.
	counted func(job, unit uint64)
	// stepStored, set by tests, is called when a pipeline's step was
	// stored, before the next step is.
	stepStored func(step string, job uint64)
}

// populate fills in defaults and checks the required fields.
func (c *Config) populate() error {
	if c.Data == "" {
		return errors.New("server: Config.Data is empty: give a data directory (braid server --data DIR)")
	}
	if len(c.Key) == 0 {
		return errors.New("server: Config.Key is empty: set the cluster key (BRAID_KEY or --key-file)")
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:7400"
	}
	if c.Ops == nil {
		c.Ops = ops.Builtin()
	}
	setDefault(&c.HeartbeatInterval, time.Second)
	setDefault(&c.WorkerTimeout, 5*c.HeartbeatInterval)
	setDefault(&c.MaxHeartbeats, 250)
	setDefault(&c.DialTimeout, 10*time.Second)
	setDefault(&c.ForgetWorkers, 10*time.Minute)
	setDefault(&c.DataPlaneTimeout, 1500*time.Millisecond)
	setDefault(&c.InFlight, 16)
	setDefault(&c.MaxThreads, 1024)
	setDefault(&c.MaxBlob, 16<<30)
	setDefault(&c.MaxRequest, 1<<20)
	if c.MaxConns == 0 {
		c.MaxConns = defaultMaxConns()
	}
	setDefault(&c.MaxModule, 64<<20)
	setDefault(&c.UnitMem, 256<<20)
	setDefault(&c.UnitTimeout, time.Minute)
	setDefault(&c.UnitOutput, 256<<20)
	setDefault(&c.MaxTries, 3)
	setDefault(&c.TakeoverAfter, 10*time.Second)
	setDefault(&c.SyncInterval, min(c.TakeoverAfter/10, time.Second))
	if c.TakeoverAfter < 3*c.SyncInterval {
		return fmt.Errorf("server: --takeover-after %s must be at least three times the sync interval %s", c.TakeoverAfter, c.SyncInterval)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxHeartbeats < 0 {
		return fmt.Errorf("server: --max-heartbeats %d: want a positive rate, heartbeats a second", c.MaxHeartbeats)
	}
	if c.WorkerTimeout <= c.HeartbeatInterval {
		return errors.New("server: WorkerTimeout must exceed HeartbeatInterval, or one late heartbeat kills a worker")
	}
	return nil
}

// metaURL is the metadata store's URL: DB, or SQLite in the data
// directory.
func (c *Config) metaURL() string {
	if c.DB != "" {
		return c.DB
	}
	return "sqlite:" + filepath.Join(c.Data, "jobs.db")
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
