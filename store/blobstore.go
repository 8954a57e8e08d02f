package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"time"
)

// BlobStore is where a server keeps its blobs: Blobs, plus what uploads,
// quotas and integrity checks need. Disk (a local directory, the
// default) and S3 (an S3-compatible object store) implement it; open one
// by its spec with OpenBlobStore.
//
// Whatever the store, a blob's ID is the sha256 of its bytes, computed
// while it is uploaded (Stage, Put), and a blob is checked against it as
// it is read: a Reader that reads a blob sequentially to its end returns
// a *CorruptError instead of the last bytes and io.EOF if the content
// does not hash to the ID. Reads at offsets are not checked; Verify
// checks a whole blob, streamed, before a caller reads it so.
type BlobStore interface {
	Blobs
	// Stage uploads everything r yields to a temporary place and hashes
	// it; the staged content becomes a blob only at Commit. It streams:
	// memory use does not grow with the size.
	Stage(ctx context.Context, r io.Reader) (*Staged, error)
	// Verify reads blob id from start to end, hashing it as it goes, and
	// returns a *CorruptError if the content does not hash to id, and an
	// error matching ErrNotFound if there is no such blob.
	Verify(ctx context.Context, id string) error
	// Used returns the bytes of every blob stored, as counted at open
	// and kept up to date by Put and Delete.
	Used() int64
	// Recount counts the stored bytes again, for blobs changed behind
	// the store's back, and returns them.
	Recount(ctx context.Context) (int64, error)
	// Unsynced returns a view of the same blobs whose Puts may skip
	// syncing to stable storage, for data that can be made again (unit
	// results). A store that has no such choice returns itself.
	Unsynced() Blobs
	// String names where the blobs are, for logs: a directory, or
	// s3://BUCKET/PREFIX at an endpoint.
	String() string
	// Close releases what the store holds open (connections). Readers
	// open already keep working until closed.
	Close() error
}

var (
	_ BlobStore = (*Disk)(nil)
	_ BlobStore = (*S3)(nil)
)

// BlobStoreConfig configures OpenBlobStore. The zero value is ready to
// use.
type BlobStoreConfig struct {
	// NoSync is DiskConfig.NoSync for a dir: store.
	NoSync bool
	// CacheDir is the directory of an S3 store's read-through cache.
	// Empty means no cache: every read goes to the object store.
	CacheDir string
	// CacheSize bounds the bytes in CacheDir (S3Config.CacheSize).
	CacheSize int64
	// Timeout bounds each request to an object store that does not
	// answer (S3Config.Timeout). Zero means 30s.
	Timeout time.Duration
	// Logger receives the store's events. Nil means slog.Default().
	Logger *slog.Logger
}

// BlobSpecHelp describes the specs OpenBlobStore takes, for flag help.
const BlobSpecHelp = `dir:PATH (a local directory) or ` +
	`s3://BUCKET/PREFIX?endpoint=https://HOST:PORT&region=R (an S3-compatible store; ` +
	`endpoint=http://... for one without TLS; no endpoint means AWS)`

// OpenBlobStore opens the blob store that spec names:
//
//	dir:PATH                  a directory on local disk (Disk)
//	s3://BUCKET/PREFIX?endpoint=https://HOST:PORT&region=R
//	                          an S3-compatible object store (S3)
//
// For s3:, endpoint=http://... talks to a store without TLS, no endpoint
// means AWS S3 (s3.amazonaws.com), and the region defaults to AWS_REGION,
// then us-east-1. Credentials come from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), else from the shared
// credentials file (AWS_SHARED_CREDENTIALS_FILE, default
// ~/.aws/credentials, profile AWS_PROFILE). cfg may be nil.
func OpenBlobStore(ctx context.Context, spec string, cfg *BlobStoreConfig) (BlobStore, error) {
	if cfg == nil {
		cfg = &BlobStoreConfig{}
	}
	switch {
	case strings.HasPrefix(spec, "dir:"):
		dir := strings.TrimPrefix(spec, "dir:")
		if dir == "" {
			return nil, fmt.Errorf("store: blob store %q: give the directory, as dir:/var/lib/braid/blobs", spec)
		}
		return OpenDisk(filepath.Clean(dir), &DiskConfig{NoSync: cfg.NoSync})
	case strings.HasPrefix(spec, "s3://"):
		s3cfg, err := ParseS3(spec)
		if err != nil {
			return nil, err
		}
		s3cfg.CacheDir, s3cfg.CacheSize = cfg.CacheDir, cfg.CacheSize
		s3cfg.Timeout, s3cfg.Logger = cfg.Timeout, cfg.Logger
		return OpenS3(ctx, s3cfg)
	default:
		return nil, fmt.Errorf("store: blob store %q: want %s", spec, BlobSpecHelp)
	}
}

// ParseS3 parses an s3:// blob store spec (see OpenBlobStore) into an
// S3Config without credentials, cache or timeouts.
func ParseS3(spec string) (*S3Config, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("store: blob store %q: %s; want %s", redact(spec), fmt.Sprintf(format, a...),
			"s3://BUCKET/PREFIX?endpoint=https://HOST:PORT&region=R")
	}
	u, err := url.Parse(spec)
	if err != nil {
		return nil, bad("%v", errors.Unwrap(err))
	}
	if u.Scheme != "s3" {
		return nil, bad("not an s3:// URL")
	}
	if u.User != nil {
		return nil, bad("credentials do not belong in the URL (it shows in logs and process lists): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a credentials file")
	}
	if u.Host == "" {
		return nil, bad("no bucket")
	}
	c := &S3Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/"), Secure: true, Endpoint: "s3.amazonaws.com"}
	q := u.Query()
	for k := range q {
		switch k {
		case "endpoint", "region":
		default:
			return nil, bad("unknown parameter %q (there are endpoint and region)", k)
		}
	}
	if e := q.Get("endpoint"); e != "" {
		eu, err := url.Parse(e)
		if err != nil || eu.Host == "" || (eu.Scheme != "http" && eu.Scheme != "https") || (eu.Path != "" && eu.Path != "/") {
			return nil, bad("endpoint %q: want https://HOST:PORT, or http://HOST:PORT for a store without TLS", e)
		}
		c.Endpoint, c.Secure = eu.Host, eu.Scheme == "https"
	}
	c.Region = q.Get("region")
	return c, nil
}

// redact drops a URL's password, should one be there by mistake.
func redact(spec string) string {
	u, err := url.Parse(spec)
	if err != nil || u.User == nil {
		return spec
	}
	return u.Redacted()
}
