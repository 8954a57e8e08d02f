package bench

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/braid-hpc/braid/api"
	"github.com/braid-hpc/braid/client"
	"github.com/braid-hpc/braid/internal/syncbuf"
	"github.com/braid-hpc/braid/ops"
	"github.com/braid-hpc/braid/server"
	"github.com/braid-hpc/braid/store"
	"github.com/braid-hpc/braid/worker"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// EnvPostgres names the PostgreSQL server the scale experiment may
// create its databases on (postgres://USER@HOST:PORT/DB); without it
// only the SQLite row runs. BRAID_TEST_POSTGRES is taken as well.
const EnvPostgres = "BRAID_BENCH_POSTGRES"

// EnvS3 names an S3-compatible object store the scale experiment may
// create a bucket in, as http://ACCESS:SECRET@HOST:PORT (https:// for
// TLS); BRAID_TEST_S3 is taken as well. With it, the rows of PostgreSQL
// servers keep their blobs there, as a cluster that outgrew one machine
// does; without it, in one shared directory.
const EnvS3 = "BRAID_BENCH_S3"

// Sizes of the scale experiment's workload.
const (
	scaleWorkers = 4  // workers, each registered with every server
	scaleThreads = 2  // threads each lends
	scaleClients = 6  // clients submitting at once
	scaleJobs    = 60 // jobs in all
	scaleUnits   = 40 // noop units per job
)

// scale measures the job system past one server: units per second and
// job latency of one server over SQLite and over PostgreSQL, and of 1, 2
// and 3 servers sharing PostgreSQL and one blob directory; then how long
// a server's job waits after the server is killed (SIGKILL) or stalled
// (SIGSTOP) before another server takes it over, with the default
// takeover time.
func (s *Suite) scale(ctx context.Context) error {
	sec := s.section("Several servers: throughput and takeover",
		fmt.Sprintf("Every server and worker runs in this process, on loopback: %d workers lending %d threads each, registered with every server; "+
			"%d clients submit %d jobs of %d noop units each (40 KB inputs), spread over the servers in turn, and wait for them. "+
			"Units/s is all units over the wall time from the first submit to the last job done; latency is each job's submit-to-done time. "+
			"The servers of one row share one database and one blob directory; rows run one after the other on the same machine.",
			scaleWorkers, scaleThreads, scaleClients, scaleJobs, scaleUnits))
	t := sec.table(text("db", "database"), text("blobs", "blobs"), integer("servers", "servers", ""), numCol("units_per_sec", "units/s", "", "%.0f"),
		dur("p50", "job latency p50"), dur("p95", "job latency p95"))
	pgAdmin := cmp.Or(os.Getenv(EnvPostgres), os.Getenv("BRAID_TEST_POSTGRES"))
	s3 := cmp.Or(os.Getenv(EnvS3), os.Getenv("BRAID_TEST_S3"))
	type row struct {
		db, blobs string
		servers   int
	}
	rows := []row{{"sqlite", "dir", 1}}
	switch {
	case pgAdmin == "":
		sec.finding("PostgreSQL rows not measured: set %s to a PostgreSQL server where the bench may create databases.", EnvPostgres)
	case s3 == "":
		rows = append(rows, row{"postgres", "dir", 1}, row{"postgres", "dir", 2}, row{"postgres", "dir", 3})
		sec.finding("S3 rows not measured: set %s to an S3-compatible store (http://ACCESS:SECRET@HOST:PORT) where the bench may create a bucket; the servers share a blob directory instead.", EnvS3)
	default:
		rows = append(rows, row{"postgres", "dir", 1}, row{"postgres", "s3", 1}, row{"postgres", "s3", 2}, row{"postgres", "s3", 3})
	}
	for _, r := range rows {
		dbURL, blobs := "", ""
		if r.db == "postgres" {
			u, drop, err := freshDatabase(ctx, pgAdmin)
			if err != nil {
				return err
			}
			dbURL = u
			defer drop()
		}
		if r.blobs == "s3" {
			b, drop, err := freshBucket(ctx, s3)
			if err != nil {
				return err
			}
			blobs = b
			defer drop()
		}
		s.logf("scale: %d server(s) over %s, blobs in %s", r.servers, r.db, r.blobs)
		res, err := scaleRun(ctx, dbURL, blobs, r.servers, scaleJobs)
		if err != nil {
			return fmt.Errorf("%d servers over %s with blobs in %s: %w", r.servers, r.db, r.blobs, err)
		}
		t.add(r.db, r.blobs, r.servers, res.unitsPerSec, res.p50, res.p95)
	}
	if pgAdmin == "" {
		return nil
	}
	tt := sec.table(text("signal", "the owner got"), dur("takeover", "until another server owned its job"), dur("done", "until the job was done"))
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		name := map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGSTOP: "SIGSTOP"}[sig]
		u, drop, err := freshDatabase(ctx, pgAdmin)
		if err != nil {
			return err
		}
		s.logf("scale: takeover after %s", name)
		took, done, err := s.takeover(ctx, u, sig)
		drop()
		if err != nil {
			return fmt.Errorf("takeover after %s: %w", sig, err)
		}
		tt.add(name, took, done)
	}
	sec.finding("Takeover: a `braid server` process with the default `--takeover-after 10s` runs a job of 400 units of 20 ms; once units are recorded it gets the signal, and an in-process server sharing its database takes the job over (a server renews its lease every third of the takeover time, so the wait is between 2/3 of it and all of it, plus one sync interval).")
	return nil
}

type scaleResult struct {
	unitsPerSec float64
	p50, p95    time.Duration
}

// quiet is the log of the scale experiment's servers and workers.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// scaleKey is the cluster key of the scale experiment.
var scaleKey = []byte("braid-bench-scale-cluster-key-0123456789")

// startServers starts n servers over dbURL (SQLite in the first's data
// directory if empty) sharing the blob store blobs (a directory in dir
// if empty); stop ends them.
func startServers(dir, dbURL, blobs string, n int, takeover time.Duration) (srvs []*server.Server, stop func(), err error) {
	if blobs == "" {
		blobs = "dir:" + filepath.Join(dir, "blobs")
	}
	var cancels []func()
	stop = func() {
		for _, c := range slices.Backward(cancels) {
			c()
		}
	}
	for i := range n {
		cfg := server.Config{Listen: "127.0.0.1:0", Data: filepath.Join(dir, fmt.Sprintf("srv%d", i)), DB: dbURL,
			Blobs: blobs, Key: scaleKey, Name: fmt.Sprintf("s%d", i), TakeoverAfter: takeover,
			InsecureHTTP: true, Logger: quiet}
		srv, err := server.New(cfg)
		if err != nil {
			stop()
			return nil, nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.Run(ctx)
		}()
		cancels = append(cancels, func() { cancel(); <-done })
		srvs = append(srvs, srv)
	}
	return srvs, stop, nil
}

// startWorkers starts n workers registered with every server in urls,
// whose noop units take d each.
func startWorkers(n, threads int, d time.Duration, urls []string) (stop func(), err error) {
	var cancels []func()
	stop = func() {
		for _, c := range cancels {
			c()
		}
	}
	reg := ops.Builtin()
	if d > 0 {
		reg = ops.NewRegistry(sleepOp{ops.Noop(), d})
	}
	for range n {
		w, err := worker.New(worker.Config{Servers: urls, Key: scaleKey, Threads: threads, Listen: []string{"127.0.0.1:0"},
			InsecureHTTP: true, Logger: quiet, Ops: reg})
		if err != nil {
			stop()
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.Run(ctx)
		}()
		cancels = append(cancels, func() { cancel(); <-done })
	}
	return stop, nil
}

// sleepOp is an operation that takes d more than its own.
type sleepOp struct {
	ops.Op
	d time.Duration
}

func (o sleepOp) Run(ctx context.Context, params map[string]string, inputs [][]byte) ([]byte, error) {
	t := time.NewTimer(o.d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return o.Op.Run(ctx, params, inputs)
}

// waitWorkers waits until every server has n live workers.
func waitWorkers(ctx context.Context, cls []*client.Client, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, c := range cls {
		for {
			h, err := c.Health(ctx)
			if err == nil && h.Workers >= n {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s has %d of %d workers after 30s (%v)", c.URL(), h.Workers, n, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// scaleRun runs the scale workload, jobs jobs, on n servers over dbURL
// and the blob store blobs (a directory if empty).
func scaleRun(ctx context.Context, dbURL, blobs string, n, jobs int) (scaleResult, error) {
	dir, err := os.MkdirTemp("", "braid-scale-")
	if err != nil {
		return scaleResult{}, err
	}
	defer os.RemoveAll(dir)
	srvs, stopSrvs, err := startServers(dir, dbURL, blobs, n, 0)
	if err != nil {
		return scaleResult{}, err
	}
	defer stopSrvs()
	var urls []string
	var cls []*client.Client
	for _, s := range srvs {
		urls = append(urls, s.URL())
		cls = append(cls, client.New(s.URL(), client.WithKey(scaleKey), client.WithInsecureHTTP()))
	}
	stopW, err := startWorkers(scaleWorkers, scaleThreads, 0, urls)
	if err != nil {
		return scaleResult{}, err
	}
	defer stopW()
	if err := waitWorkers(ctx, cls, scaleWorkers); err != nil {
		return scaleResult{}, err
	}
	in := make([]byte, 40<<10)
	rand.Read(in)
	input, err := cls[0].Put(ctx, bytes.NewReader(in))
	if err != nil {
		return scaleResult{}, err
	}
	var (
		mu    sync.Mutex
		lat   []time.Duration
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	for c := range scaleClients {
		wg.Go(func() {
			for k := c; k < jobs; k += scaleClients {
				cl := cls[k%len(cls)]
				t0 := time.Now()
				st, err := cl.Submit(ctx, api.JobRequest{Op: "noop", Input: input, Units: scaleUnits})
				if err == nil {
					st, err = cl.Wait(ctx, st.Job, nil)
				}
				if err == nil && st.State != api.JobDone {
					err = fmt.Errorf("job %d %s: %s", st.Job, st.State, st.Error)
				}
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				lat = append(lat, time.Since(t0))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return scaleResult{}, first
	}
	wall := time.Since(start)
	slices.Sort(lat)
	return scaleResult{
		unitsPerSec: float64(jobs*scaleUnits) / wall.Seconds(),
		p50:         lat[len(lat)/2],
		p95:         lat[len(lat)*95/100],
	}, nil
}

// takeover runs a job on a braid server process over dbURL, sends it
// sig once units are recorded and measures how long until a server in
// this process owns the job, and until the job is done.
func (s *Suite) takeover(ctx context.Context, dbURL string, sig syscall.Signal) (took, done time.Duration, err error) {
	dir, err := os.MkdirTemp("", "braid-takeover-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(dir)
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, scaleKey, 0o600); err != nil {
		return 0, 0, err
	}
	cmd := exec.Command(s.bin(), "server", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "victim"), "--db", dbURL,
		"--blobs", "dir:"+filepath.Join(dir, "blobs"), "--name", "victim", "--key-file", keyFile, "--insecure-http")
	cmd.Stderr = &syncbuf.Buffer{}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	}()
	srvs, stopSrvs, err := startServers(dir, dbURL, "", 1, 0)
	if err != nil {
		return 0, 0, err
	}
	defer stopSrvs()
	victim := ""
	for deadline := time.Now().Add(30 * time.Second); victim == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		victim = listening(cmd.Stderr.(*syncbuf.Buffer).String())
	}
	if victim == "" {
		return 0, 0, fmt.Errorf("the server process did not start: %s", cmd.Stderr.(*syncbuf.Buffer).String())
	}
	stopW, err := startWorkers(2, 2, 20*time.Millisecond, []string{victim, srvs[0].URL()})
	if err != nil {
		return 0, 0, err
	}
	defer stopW()
	cv := client.New(victim, client.WithKey(scaleKey), client.WithInsecureHTTP())
	cs := client.New(srvs[0].URL(), client.WithKey(scaleKey), client.WithInsecureHTTP())
	if err := waitWorkers(ctx, []*client.Client{cv, cs}, 2); err != nil {
		return 0, 0, err
	}
	in := make([]byte, 64<<10)
	rand.Read(in)
	input, err := cv.Put(ctx, bytes.NewReader(in))
	if err != nil {
		return 0, 0, err
	}
	st, err := cv.Submit(ctx, api.JobRequest{Op: "noop", Input: input, Units: 400})
	if err != nil {
		return 0, 0, err
	}
	db, err := store.OpenMeta(ctx, dbURL, nil)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		j, err := db.Job(ctx, st.Job)
		if err == nil && j.Done >= 20 {
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("no unit recorded after 30s (%v)", err)
		}
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	for deadline := t0.Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		j, err := db.Job(ctx, st.Job)
		if err == nil && j.Server != "victim" {
			took = time.Since(t0)
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("nobody took the job over in a minute (%v)", err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	end, err := cs.Wait(wctx, st.Job, nil)
	if err != nil || end.State != api.JobDone {
		return 0, 0, fmt.Errorf("job after the takeover: %s %s %v", end.State, end.Error, err)
	}
	var out bytes.Buffer
	if _, err := cs.Get(ctx, end.Output, &out); err != nil || !bytes.Equal(out.Bytes(), in) {
		return 0, 0, fmt.Errorf("the output after the takeover differs from the input (%v)", err)
	}
	return took, time.Since(t0), nil
}

// listening finds the control API's URL in a braid server's log.
func listening(log string) string {
	for _, line := range strings.Split(log, "\n") {
		if _, rest, ok := strings.Cut(line, "url="); ok {
			u, _, _ := strings.Cut(rest, " ")
			if strings.HasPrefix(u, "http") {
				return u
			}
		}
	}
	return ""
}

// freshDatabase creates a database on the PostgreSQL server admin names
// and returns its URL and a function that drops it.
func freshDatabase(ctx context.Context, admin string) (string, func(), error) {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", EnvPostgres, err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := "braid_bench_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		conn.Close(ctx)
		return "", nil, fmt.Errorf("create a database for the bench: %w", err)
	}
	conn.Close(ctx)
	u, err := url.Parse(admin)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, admin); err == nil {
			c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	}
	return u.String(), drop, nil
}

// freshBucket creates a bucket of its own in the S3-compatible store
// spec names (http://ACCESS:SECRET@HOST:PORT) and returns the --blobs
// URL of a store in it; drop empties and removes it. The servers of this
// process find the credentials in AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, which it sets.
func freshBucket(ctx context.Context, spec string) (blobs string, drop func(), err error) {
	u, err := url.Parse(spec)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.User == nil {
		return "", nil, fmt.Errorf("%s: want http://ACCESS:SECRET@HOST:PORT (https:// for TLS)", EnvS3)
	}
	access := u.User.Username()
	secret, _ := u.User.Password()
	region := cmp.Or(u.Query().Get("region"), "us-east-1")
	mc, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(access, secret, ""), Secure: u.Scheme == "https",
		Region: region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", EnvS3, err)
	}
	var b [6]byte
	rand.Read(b[:])
	bucket := "braid-bench-" + hex.EncodeToString(b[:])
	if err := mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: region}); err != nil {
		return "", nil, fmt.Errorf("create bucket %s at %s: %w", bucket, u.Host, err)
	}
	os.Setenv("AWS_ACCESS_KEY_ID", access)
	os.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	drop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for obj := range mc.ListObjectsIter(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
			if obj.Err == nil {
				mc.RemoveObject(ctx, bucket, obj.Key, minio.RemoveObjectOptions{})
			}
		}
		mc.RemoveBucket(ctx, bucket)
	}
	return fmt.Sprintf("s3://%s/blobs?endpoint=%s://%s&region=%s", bucket, u.Scheme, u.Host, region), drop, nil
}
