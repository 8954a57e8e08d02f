package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/store"
	"github.com/braid-hpc/braid/transport"

	"github.com/spf13/pflag"
)

func init() {
	register(&command{
		name:    "server",
		summary: "run a job server: control API, job store, scheduler",
		run:     runServer,
	})
}

const serverDescription = `
Runs a braid server: the HTTP control API (clients upload data and submit
jobs; workers register), the job store (blobs in --data, metadata in
--db) and the scheduler. For every worker that registers, the server
dials a data-plane session to the worker's addresses, one path per
address, and opens one stream per thread the worker lends; computation
units and their results travel there.

The server runs until interrupted. Started again on the same --data
directory it resumes the jobs it had accepted.

Storage: every blob is checked against its sha256 as it is read; a
corrupt one fails the jobs and downloads that need it, and uploading the
same bytes again heals it. A job's intermediate blobs (unit results, tile
data) are removed when it ends; its output is kept for --retain (default:
until deleted), then removed, and fetching it answers 410 Gone.
--max-upload bounds one upload (413), --max-data all stored bytes (507).

Metadata (jobs, units, workers, tokens, operations) is kept by default in
a SQLite file, DATA/jobs.db. --db postgres://USER@HOST:PORT/DB keeps it in
PostgreSQL instead (also BRAID_DB, or 'db:' in --config, which keeps the
password off the command line); the server creates or upgrades the schema
and refuses one from a newer braid. 'braid db copy' moves an existing
SQLite store into PostgreSQL; 'braid db --help' says more.

Blobs: by default in DATA/blobs. --blobs puts them elsewhere: a directory
(dir:PATH) or an S3-compatible object store:

  --blobs 's3://BUCKET/PREFIX?endpoint=https://HOST:PORT&region=R'

(endpoint=http://... for a store without TLS; no endpoint means AWS S3).
The bucket must exist. Credentials come from AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY (AWS_REGION for the region), else from the shared
credentials file (~/.aws/credentials, AWS_SHARED_CREDENTIALS_FILE,
AWS_PROFILE). Blobs read from the store are checked as on disk and kept
in a read-through cache in DATA/blobcache, bounded by --blob-cache.
BRAID_BLOBS and 'blobs:' in the --config file work as for every flag.
'braid blobs copy' moves the blobs of DATA/blobs into a bucket.

The control API is HTTPS: with the certificate of --tls-cert and
--tls-key, or one generated on the first start and kept in DATA/tls (its
fingerprint is printed). Clients with the cluster key check it by the
server's proof of the key; others pin it with a join token (braid token
create) or --server-fingerprint.

  braid server --listen 10.0.0.1:7400 --data /var/lib/braid --retain 7d --max-data 500G`

// parseRetention parses --retain: a Go duration ("36h", "90m") or a
// number of days ("7d"); "0" means keep forever.
func parseRetention(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	bad := errors.New("want days such as 7d, a duration such as 36h, or 0 to keep outputs forever")
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n < 0 || n > 100*365 {
			return 0, bad
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, bad
	}
	return d, nil
}

// retainValue is --retain: a duration that also takes days (7d).
type retainValue struct {
	d    time.Duration
	text string
}

func (v *retainValue) Set(s string) (err error) {
	v.d, err = parseRetention(s)
	v.text = s
	return err
}

func (v *retainValue) String() string {
	if v.text == "" {
		return "0"
	}
	return v.text
}

func (v *retainValue) Type() string { return "retention" }

// logFlags registers -V/--verbose, --log-level and --log-format and returns a
// constructor of the command's logger, which writes to env.Stderr. The
// lines name the job, unit, worker and path they concern with fixed
// keys (job, unit, worker, path, stream, bytes), in JSON one object a
// line with --log-format json.
func logFlags(fs *pflag.FlagSet) func(env *Env) *slog.Logger {
	verbose := fs.BoolP("verbose", "V", false, "log every unit and request (the same as --log-level debug); -V as in every braid command")
	level := &logLevel{l: slog.LevelInfo}
	fs.Var(level, "log-level", "log lines of this `level` and above: debug, info, warn or error")
	withChoices(fs, "log-level", "debug", "info", "warn", "error")
	format := logFormat("text")
	fs.Var(&format, "log-format", "log `format`: text (key=value) or json (one object a line)")
	withChoices(fs, "log-format", "text", "json")
	return func(env *Env) *slog.Logger {
		opts := &slog.HandlerOptions{Level: level.l}
		if *verbose {
			opts.Level = slog.LevelDebug
		}
		if format == "json" {
			return slog.New(slog.NewJSONHandler(env.Stderr, opts))
		}
		return slog.New(slog.NewTextHandler(env.Stderr, opts))
	}
}

func runServer(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "server", "--listen HOST:PORT --data DIR [flags]", serverDescription)
	listen := fs.String("listen", "127.0.0.1:7400", "`host:port` of the control API")
	data := fs.String("data", "", "`directory` of the blobs and the default job database (required)")
	db := fs.String("db", "", "metadata store `url`: sqlite:PATH or postgres://USER@HOST:PORT/DB (default: sqlite:DATA/jobs.db); see braid db --help")
	blobs := fs.String("blobs", "", "the `store` that keeps the blobs: "+store.BlobSpecHelp+" (default: dir:DATA/blobs)")
	blobCache := sizeFlag(fs, "blob-cache", "2G", 0, 0, "2G, or 0 for no cache", "bound of the read-through cache of an s3:// --blobs store, in DATA/blobcache (`size`; 0: no cache)")
	heartbeat := fs.Duration("heartbeat", time.Second, "how often the server asks each worker for a heartbeat on its data-plane session, or a worker not asked sends one over HTTPS (less often in a cluster larger than --max-heartbeats allows)")
	timeout := fs.Duration("worker-timeout", 0, "declare a worker dead after this long without heartbeat (default 5 heartbeats; grows with the heartbeat interval)")
	maxBeats := fs.Int("max-heartbeats", 250, "the server takes at most `n` heartbeats a second from all its workers together: with more workers than this times --heartbeat, "+
		"each is asked to beat less often (1,000 workers: every 4s), and --worker-timeout grows in proportion")
	dataTimeout := fs.Duration("data-plane-timeout", 0, "declare a worker dead when every path of its data-plane session has been down this long, "+
		"whatever its heartbeats say (default 1.5s: a stopped or cut-off worker is noticed within 2s; a killed one in about 0.1s, when its host refuses the redial)")
	inFlight := fs.Int("in-flight", 0, "a stream holds `n` units at once, for jobs that do not say (default 16)")
	maxThreads := fs.Int("max-threads", 0, "one worker may lend at most `n` threads (streams) (default 1024)")
	workerNets := fs.StringSlice("worker-networks", nil, "network ranges (`cidr`) whose addresses a worker registering with a worker token may give as its data plane, "+
		"besides the address it connects from (comma-separated, e.g. 10.1.0.0/16,10.2.0.0/16); the server dials no other address for such workers")
	chanKind := fs.String("transport", "tcp", "channel `kind` of the data-plane paths to workers: tcp, mptcp, sctp or sctp-udp (workers must listen with the same)")
	withChoices(fs, "transport", channelKinds...)
	probe := pathProbeFlag(fs)
	plain := plaintextFlag(fs)
	durable := fs.Bool("durable", false, "sync unit results and every database commit to disk (slower; survives power loss)")
	name := fs.String("name", "", "this server's `name` among the servers sharing a postgres:// --db, unique and the same across restarts (default HOST:PORT)")
	takeover := fs.Duration("takeover-after", 0, "with a postgres:// --db shared by several servers: how long the jobs of a server that died or stalled wait "+
		"before another takes them over (default 10s)")
	lim := addLimitFlags(fs)
	maxTries := fs.Int("max-tries", 0, "a unit may fail `n` times before its job fails, for jobs that do not say (default 3)")
	maxModule := sizeFlag(fs, "max-module", "64M", 1, 0, "64M", "largest WebAssembly `size` an operation may upload")
	maxConns := fs.Int("max-conns", 0, "keep at most `n` control API connections open at once; more wait until one closes (default: a quarter of the file descriptor limit, 64 to 4096)")
	maxUpload := sizeFlag(fs, "max-upload", "16G", 1, 0, "16G", "largest `size` of one upload; larger ones are refused (413)")
	maxData := sizeFlag(fs, "max-data", "0", 0, 0, "500G, or 0 for no limit", "most bytes stored in all (`size`; 0: no limit but the disk); uploads past it and jobs submitted at it are refused (507)")
	retain := &retainValue{}
	fs.Var(retain, "retain", "keep job outputs this `duration` after the job ends, e.g. 7d or 36h; 0 keeps them until deleted")
	sctp := addSCTPFlags(fs)
	tlsCert := fs.String("tls-cert", "", "PEM `file` of the control API's TLS certificate (default: one generated on the first start, kept in DATA/tls)")
	tlsKey := fs.String("tls-key", "", "PEM `file` of the --tls-cert certificate's private key")
	insecure := fs.Bool("insecure-http", false, "serve the control API over plain HTTP, WITHOUT TLS: anyone on the network "+
		"can read requests, replay credentials and forge answers")
	key := keyFlag(fs)
	logger := logFlags(fs)
	configFlag(fs)
	obs := addObsFlags(fs, "server")
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		env.Errorf("server: unexpected argument %q", fs.Arg(0))
		return 2
	}
	if *data == "" {
		env.Errorf("server: give the data directory with --data DIR")
		return 2
	}
	k, err := key()
	if err != nil {
		env.Errorf("server: %v", err)
		return 2
	}
	limits, err := lim.limits()
	if err != nil {
		env.Errorf("server: %v", err)
		return 2
	}
	cacheSize := blobCache.Bytes()
	if cacheSize == 0 {
		cacheSize = -1 // server.Config: no cache
	}
	if *maxTries < 0 || *maxTries > 100 {
		env.Errorf("server: --max-tries %d: want 1 to 100", *maxTries)
		return 2
	}
	ch, err := sctp.channel(*chanKind)
	if err != nil {
		env.Errorf("server: %v", err)
		return 2
	}
	if (*tlsCert != "" || *tlsKey != "") && *insecure {
		env.Errorf("server: --insecure-http serves no certificate; drop --tls-cert and --tls-key, or --insecure-http")
		return 2
	}
	var nets []netip.Prefix
	for _, n := range *workerNets {
		p, err := netip.ParsePrefix(strings.TrimSpace(n))
		if err != nil {
			env.Errorf("server: --worker-networks %q: want a network in CIDR form such as 10.1.0.0/16", n)
			return 2
		}
		nets = append(nets, p.Masked())
	}
	log := logger(env)
	srv, err := server.New(server.Config{
		Listen: *listen, Data: *data, DB: *db, Blobs: *blobs, BlobCache: cacheSize, Key: k, HeartbeatInterval: *heartbeat, WorkerTimeout: *timeout,
		MaxHeartbeats:    *maxBeats,
		DataPlaneTimeout: *dataTimeout, InFlight: *inFlight, MaxThreads: *maxThreads, WorkerNetworks: nets, Durable: *durable, Logger: log,
		UnitMem: limits.Memory, UnitOutput: limits.Output, UnitTimeout: limits.Timeout, MaxTries: *maxTries, MaxModule: maxModule.Bytes(),
		MaxBlob: maxUpload.Bytes(), MaxData: maxData.Bytes(), Retain: retain.d, MaxConns: *maxConns,
		Transport: probe(&transport.Config{Transport: *chanKind, Channel: ch, InsecurePlaintext: *plain}),
		TLSCert:   *tlsCert, TLSKey: *tlsKey, InsecureHTTP: *insecure, Name: *name, TakeoverAfter: *takeover,
	})
	if err != nil {
		env.Errorf("%v", err)
		return 1
	}
	fmt.Fprintf(env.Stdout, "braid server listening on %s (data in %s)\n", srv.URL(), *data)
	if *db != "" {
		fmt.Fprintf(env.Stdout, "metadata store %s\n", store.Redact(*db))
	}
	if fp := srv.Fingerprint(); fp != nil {
		fmt.Fprintf(env.Stdout, "certificate fingerprint %s\n", api.FormatFingerprint(fp))
	} else {
		env.Errorf("WARNING: --insecure-http: the control API is plain HTTP; credentials can be sniffed and replayed")
	}
	stop, err := obs.start(log, srv.MetricsHandler())
	if err != nil {
		env.Errorf("server: %v", err)
		return 1
	}
	defer stop()
	if err := srv.Run(ctx); err != nil {
		env.Errorf("%v", err)
		return 1
	}
	return 0
}
