package store

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// S3Config configures an S3 store. Endpoint and Bucket are required; every
// other field's zero value works.
type S3Config struct {
	// Endpoint is the HOST:PORT of the object store; Secure says whether
	// it speaks TLS (https). Required.
	Endpoint string
	Secure   bool
	// Bucket holds the blobs; it must exist. Required.
	Bucket string
	// Prefix is the folder of the blobs in the bucket: blob ID lives at
	// PREFIX/ID, uploads in progress at PREFIX/tmp/. Empty means the
	// bucket's top level.
	Prefix string
	// Region is the bucket's region. Empty means AWS_REGION (or
	// AWS_DEFAULT_REGION) if set, else the store is asked.
	Region string
	// AccessKey and SecretKey are the credentials. Empty means
	// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN,
	// else the shared credentials file (AWS_SHARED_CREDENTIALS_FILE or
	// ~/.aws/credentials, profile AWS_PROFILE or default).
	AccessKey, SecretKey string
	// CacheDir is the directory of the read-through cache on local disk:
	// blobs read whole (or put) are kept there, verified, and read from
	// there while the object is unchanged. Empty, or CacheSize 0, means
	// no cache.
	CacheDir string
	// CacheSize bounds the bytes of the blobs in the cache; the least
	// recently used go first. A blob larger than this is never cached.
	CacheSize int64
	// PartSize is the size of one part of a multipart upload: an upload
	// holds up to two parts in memory, and the largest blob is 10,000
	// parts. Zero means 16 MiB (blobs up to 156 GiB); at least 5 MiB.
	PartSize int64
	// Timeout bounds a request the store does not answer, and a
	// download that stalls for this long. Zero means 30s.
	Timeout time.Duration
	// Logger receives the store's events. Nil means slog.Default().
	Logger *slog.Logger

	// copyPart is the part size of the server-side copy that puts a large
	// upload in place: objects up to it are copied in one request. Zero
	// means 512 MiB; tests lower it.
	copyPart int64
}

// S3 is a BlobStore in an S3-compatible object store: blob ID lives at
// PREFIX/ID in the bucket. It is safe for concurrent use.
//
// An upload is hashed as it streams. One that fits in a part (PartSize)
// is hashed first and then put under its ID at once; a larger one goes,
// part by part, to a temporary key under PREFIX/tmp/, and only once it
// is whole and hashed is it copied, by the object store, to PREFIX/ID:
// no object is ever under an ID its bytes do not hash to, as far as
// braid wrote it. Reads are checked as Disk's are: a sequential read from
// the start hashes the bytes as they come and returns a *CorruptError
// instead of the last bytes if they do not hash to the ID; ReadAt and
// reads after a Seek are ranged GETs, unchecked (Verify first).
//
// Blobs read whole, and blobs put, are kept in a bounded read-through
// cache on local disk (S3Config.CacheDir), each tagged with the object's
// ETag; Open asks the store for the object every time (a HEAD), so an
// object deleted or replaced behind braid's back is not served from the
// cache.
//
// Used counts the blobs under the prefix at open and follows this
// store's Puts and Deletes; servers that share a prefix see each other's
// changes only at Recount.
type S3 struct {
	c      *minio.Client
	tr     *http.Transport
	bucket string
	prefix string // "" or ending in "/"
	where  string // s3://BUCKET/PREFIX at URL, for messages
	url    string // the endpoint's URL
	part   int64
	copy   int64
	wait   time.Duration
	used   atomic.Int64
	cache  *blobCache // nil: no cache
	log    *slog.Logger
	// commits orders the commits of a blob, by a hash of its ID.
	commits [16]sync.Mutex
}

// OpenS3 connects to the object store of cfg and checks that the bucket
// exists and the credentials are accepted; the errors say which is wrong
// (ErrNoBucket, ErrDenied, ErrUnreachable). It counts the stored bytes
// (see Used) and removes the leftovers of uploads interrupted more than
// a day ago.
func OpenS3(ctx context.Context, cfg *S3Config) (*S3, error) {
	c := *cfg
	if c.Endpoint == "" || c.Bucket == "" {
		return nil, errors.New("store: s3: give the endpoint and the bucket (s3://BUCKET/PREFIX?endpoint=https://HOST:PORT)")
	}
	setDefault(&c.PartSize, 16<<20)
	setDefault(&c.copyPart, 512<<20)
	setDefault(&c.Timeout, 30*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if err := s3utils.CheckValidBucketName(c.Bucket); err != nil {
		return nil, fmt.Errorf("store: s3: bucket name %q: %v (s3://BUCKET/PREFIX: 3 to 63 lowercase letters, digits, dots and hyphens)", c.Bucket, err)
	}
	if c.PartSize < 5<<20 {
		return nil, fmt.Errorf("store: s3: part size %d is below the 5 MiB S3 allows", c.PartSize)
	}
	if c.Region == "" {
		c.Region = cmp.Or(os.Getenv("AWS_REGION"), os.Getenv("AWS_DEFAULT_REGION"))
	}
	scheme := "http"
	if c.Secure {
		scheme = "https"
	}
	s := &S3{
		bucket: c.Bucket,
		url:    scheme + "://" + c.Endpoint,
		part:   c.PartSize,
		copy:   c.copyPart,
		wait:   c.Timeout,
		log:    c.Logger,
	}
	if p := strings.Trim(c.Prefix, "/"); p != "" {
		s.prefix = p + "/"
	}
	s.where = fmt.Sprintf("s3://%s/%s at %s", c.Bucket, strings.TrimSuffix(s.prefix, "/"), s.url)

	var creds *credentials.Credentials
	if c.AccessKey != "" || c.SecretKey != "" {
		creds = credentials.NewStaticV4(c.AccessKey, c.SecretKey, "")
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{&credentials.EnvAWS{}, &credentials.FileAWSCredentials{}})
		if v, err := creds.Get(); err != nil || v.AccessKeyID == "" {
			return nil, fmt.Errorf("store: s3: no credentials for %s: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or write them to ~/.aws/credentials (AWS_SHARED_CREDENTIALS_FILE)", s.where)
		}
	}
	dialer := &net.Dialer{Timeout: min(c.Timeout, 10*time.Second), KeepAlive: 30 * time.Second}
	s.tr = &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   c.Timeout,
		ResponseHeaderTimeout: c.Timeout,
		ExpectContinueTimeout: time.Second,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		// Blobs are hashed and often compressed already; asking for gzip
		// would make ranged reads unusable.
		DisableCompression: true,
	}
	var err error
	s.c, err = minio.New(c.Endpoint, &minio.Options{
		Creds:        creds,
		Secure:       c.Secure,
		Transport:    s.tr,
		Region:       c.Region,
		BucketLookup: minio.BucketLookupPath,
		// Requests are bounded by Timeout; retrying a dead endpoint ten
		// times would multiply that.
		MaxRetries: 3,
	})
	if err != nil {
		return nil, fmt.Errorf("store: s3: %s: %w", s.where, err)
	}
	if err := s.check(ctx); err != nil {
		s.tr.CloseIdleConnections()
		return nil, err
	}
	if c.CacheDir != "" && c.CacheSize > 0 {
		if s.cache, err = openBlobCache(c.CacheDir, c.CacheSize); err != nil {
			s.tr.CloseIdleConnections()
			return nil, err
		}
	}
	if _, err := s.Recount(ctx); err != nil {
		s.tr.CloseIdleConnections()
		return nil, err
	}
	s.clearTemp(ctx)
	return s, nil
}

// check makes sure the bucket is there and the credentials work.
func (s *S3) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.wait)
	defer cancel()
	ok, err := s.c.BucketExists(ctx, s.bucket)
	if err != nil {
		return s.wrap("open", "", err)
	}
	if !ok {
		return fmt.Errorf("store: s3: bucket %q does not exist at %s: %w; create it (e.g. aws s3 mb s3://%s) or fix the bucket in --blobs",
			s.bucket, s.url, ErrNoBucket, s.bucket)
	}
	// BucketExists answers for anonymous users too on some stores: a
	// listing proves the credentials.
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	for obj := range s.c.ListObjectsIter(lctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix, MaxKeys: 1}) {
		if obj.Err != nil {
			return s.wrap("open", "", obj.Err)
		}
		break
	}
	return nil
}

// clearTemp removes the temporary objects of uploads that a crash
// interrupted. Uploads of other servers that share the prefix may be in
// progress, so only those older than a day go.
func (s *S3) clearTemp(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.wait)
	defer cancel()
	old := time.Now().Add(-24 * time.Hour)
	n := 0
	for obj := range s.c.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + "tmp/", Recursive: true}) {
		if obj.Err != nil {
			s.log.Warn("could not list the leftovers of interrupted uploads", "store", s.where, "err", s.wrap("list", "", obj.Err))
			return
		}
		if obj.LastModified.Before(old) && s.c.RemoveObject(ctx, s.bucket, obj.Key, minio.RemoveObjectOptions{}) == nil {
			n++
		}
	}
	if n > 0 {
		s.log.Info("removed the leftovers of interrupted uploads", "store", s.where, "objects", n)
	}
}

func (s *S3) key(id string) string { return s.prefix + id }

// object names blob id's object, for messages.
func (s *S3) object(id string) string {
	return fmt.Sprintf("s3://%s/%s on %s", s.bucket, s.key(id), s.url)
}

// String implements BlobStore.
func (s *S3) String() string { return s.where }

// Close implements BlobStore.
func (s *S3) Close() error {
	s.tr.CloseIdleConnections()
	return nil
}

// Unsynced implements BlobStore: the object store decides durability.
func (s *S3) Unsynced() Blobs { return s }

// Used implements BlobStore.
func (s *S3) Used() int64 { return s.used.Load() }

// Recount implements BlobStore.
func (s *S3) Recount(ctx context.Context) (int64, error) { return recount(ctx, s, &s.used) }

// Put implements Blobs.
func (s *S3) Put(ctx context.Context, r io.Reader) (string, int64, error) {
	st, err := s.Stage(ctx, r)
	if err != nil {
		return "", 0, err
	}
	defer st.Discard()
	if err := st.Commit(ctx); err != nil {
		return "", 0, err
	}
	return st.ID, st.Size, nil
}

// s3Stage is an S3 store's staged content: the bytes themselves if they
// fit in a part, else a temporary object.
type s3Stage struct {
	s    *S3
	data []byte // small content, put at Commit
	tmp  string // the temporary object of large content
	fill *cacheFill
	done bool
}

// Stage implements BlobStore.
func (s *S3) Stage(ctx context.Context, r io.Reader) (*Staged, error) {
	h := sha256.New()
	fill := s.cache.fill()
	var size int64
	in := &sourceReader{r: ctxReader{ctx, r}}
	src := io.TeeReader(in, io.MultiWriter(h, fill, countWriter{&size}))
	// The first bytes decide: content that fits in a part is kept in
	// memory until Commit; a small buffer first, so that the many small
	// blobs (unit results) do not each take a part's worth.
	buf := make([]byte, min(s.part, 64<<10))
	n, err := io.ReadFull(src, buf)
	if err == nil && int64(n) < s.part {
		whole := make([]byte, s.part)
		copy(whole, buf)
		var m int
		m, err = io.ReadFull(src, whole[n:])
		buf, n = whole, n+m
	}
	switch err {
	case io.EOF, io.ErrUnexpectedEOF:
		return &Staged{ID: hex.EncodeToString(h.Sum(nil)), Size: size, s: &s3Stage{s: s, data: buf[:n], fill: fill}}, nil
	case nil:
	default:
		fill.abort()
		return nil, fmt.Errorf("store: put: %w", err)
	}
	// More than a part: a multipart upload to a temporary object. minio
	// holds one part at a time.
	tmp := s.prefix + "tmp/" + rand.Text()
	_, err = s.c.PutObject(ctx, s.bucket, tmp, io.MultiReader(bytes.NewReader(buf), src), -1,
		minio.PutObjectOptions{PartSize: uint64(s.part), ContentType: "application/octet-stream"})
	if err == nil {
		err = in.err // minio may take a failed read as the end
	}
	if err != nil {
		fill.abort()
		s.remove(tmp)
		if in.err != nil {
			return nil, fmt.Errorf("store: put: %w", in.err)
		}
		return nil, s.wrap("put", "", err)
	}
	return &Staged{ID: hex.EncodeToString(h.Sum(nil)), Size: size, s: &s3Stage{s: s, tmp: tmp, fill: fill}}, nil
}

// sourceReader remembers the error of the content's reader, to tell it
// from the object store's.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

type countWriter struct{ n *int64 }

func (c countWriter) Write(p []byte) (int, error) {
	*c.n += int64(len(p))
	return len(p), nil
}

func (st *s3Stage) discard() {
	if st.done {
		return
	}
	st.done = true
	st.fill.abort()
	if st.tmp != "" {
		st.s.remove(st.tmp)
	}
	st.data = nil
}

// commit puts the content in place as blob id, replacing what is there:
// a corrupt copy is healed, a sound one rewritten with the same bytes.
func (st *s3Stage) commit(ctx context.Context, id string, size int64) error {
	if st.done {
		return errors.New("store: commit: the staged content was discarded or committed")
	}
	s := st.s
	key := s.key(id)
	// Puts of the same blob take turns, so that Used counts it once.
	mu := &s.commits[id[0]%byte(len(s.commits))]
	mu.Lock()
	defer mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, s.wait)
	old, err := s.c.StatObject(sctx, s.bucket, key, minio.StatObjectOptions{})
	cancel()
	existed := err == nil
	if err != nil && !isNotFound(err) {
		return s.wrap("put", id, err)
	}
	var etag string
	if st.tmp == "" {
		info, err := s.c.PutObject(ctx, s.bucket, key, bytes.NewReader(st.data), int64(len(st.data)),
			minio.PutObjectOptions{ContentType: "application/octet-stream", SendContentMd5: true})
		if err != nil {
			return s.wrap("put", id, err)
		}
		etag = info.ETag
	} else {
		info, err := s.c.ComposeObject(ctx, minio.CopyDestOptions{Bucket: s.bucket, Object: key, PartSize: uint64(s.copy)},
			minio.CopySrcOptions{Bucket: s.bucket, Object: st.tmp})
		if err != nil {
			return s.wrap("put", id, err)
		}
		etag = info.ETag
		s.remove(st.tmp)
		st.tmp = ""
	}
	st.done = true
	st.data = nil
	delta := size
	if existed {
		delta -= old.Size
	}
	s.used.Add(delta)
	st.fill.commit(id, etag, size)
	return nil
}

// remove deletes a temporary object, logging a failure: it is cleared
// later (clearTemp).
func (s *S3) remove(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.wait)
	defer cancel()
	if err := s.c.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		s.log.Warn("could not remove a temporary object", "store", s.where, "key", key, "err", s.wrap("remove", "", err))
	}
}

// stat asks the store for blob id's object.
func (s *S3) stat(op, id string) (minio.ObjectInfo, error) {
	if !ValidID(id) {
		return minio.ObjectInfo{}, fmt.Errorf("store: %s %q: %w", op, id, ErrInvalidID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.wait)
	defer cancel()
	info, err := s.c.StatObject(ctx, s.bucket, s.key(id), minio.StatObjectOptions{})
	if err != nil {
		return info, s.wrap(op, id, err)
	}
	return info, nil
}

// Stat implements Blobs.
func (s *S3) Stat(id string) (BlobInfo, error) {
	info, err := s.stat("stat", id)
	if err != nil {
		return BlobInfo{}, err
	}
	return BlobInfo{ID: id, Size: info.Size, ModTime: info.LastModified}, nil
}

// List implements Blobs.
func (s *S3) List(ctx context.Context) ([]BlobInfo, error) {
	var out []BlobInfo
	for obj := range s.c.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix}) {
		if obj.Err != nil {
			return nil, s.wrap("list blobs", "", obj.Err)
		}
		id := strings.TrimPrefix(obj.Key, s.prefix)
		if !ValidID(id) {
			continue // PREFIX/tmp/, or not braid's
		}
		out = append(out, BlobInfo{ID: id, Size: obj.Size, ModTime: obj.LastModified})
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("store: list blobs: %w", err)
	}
	slices.SortFunc(out, func(a, b BlobInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// Delete implements Blobs.
func (s *S3) Delete(id string) error {
	info, err := s.stat("delete", id)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.wait)
	defer cancel()
	if err := s.c.RemoveObject(ctx, s.bucket, s.key(id), minio.RemoveObjectOptions{}); err != nil {
		return s.wrap("delete", id, err)
	}
	s.used.Add(-info.Size)
	s.cache.evict(id)
	return nil
}

// Open implements Blobs; see S3 for what is verified.
func (s *S3) Open(id string) (Reader, int64, error) {
	info, err := s.stat("open", id)
	if err != nil {
		return nil, 0, err
	}
	if f, path, ok := s.cache.open(id, info.ETag, info.Size); ok {
		return &cachedBlob{blobFile: blobFile{f: f, id: id, path: path, size: info.Size, h: sha256.New()}, cache: s.cache}, info.Size, nil
	}
	return &s3Reader{s: s, id: id, etag: info.ETag, size: info.Size, h: sha256.New(), stall: newStall(s.wait)}, info.Size, nil
}

// Verify implements BlobStore. A blob in the cache is verified there; one
// that is not is read from the store (and cached if it is sound).
func (s *S3) Verify(ctx context.Context, id string) error {
	r, _, err := s.Open(id)
	if err != nil {
		return err
	}
	defer r.Close()
	if sr, ok := r.(*s3Reader); ok {
		stop := context.AfterFunc(ctx, sr.abort)
		defer stop()
	}
	buf := make([]byte, verifyBuf)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, err := r.Read(buf)
		if err == io.EOF {
			return nil
		}
		if errors.Is(err, ErrCorrupt) {
			if _, cached := r.(*cachedBlob); cached {
				// The cache's copy rotted; the store's may be sound.
				return s.Verify(ctx, id)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
	}
}

// cachedBlob is a blob read from the cache; a corrupt copy leaves the
// cache.
type cachedBlob struct {
	blobFile
	cache *blobCache
}

func (c *cachedBlob) Read(p []byte) (int, error) {
	n, err := c.blobFile.Read(p)
	if errors.Is(err, ErrCorrupt) {
		c.cache.evict(c.id)
	}
	return n, err
}

// s3Reader reads an object: sequential reads stream one GET from the
// position on, hashing from the start as blobFile does; ReadAt is a
// ranged GET, or a read of the cache's copy once there is one.
type s3Reader struct {
	s        *S3
	id, etag string
	size     int64
	pos      int64
	body     io.ReadCloser // a GET from bodyPos on
	bodyPos  int64
	stall    *stall
	h        hash.Hash // has seen bytes [0, hashed)
	hashed   int64
	checked  bool
	err      error // sticky: the content is corrupt
	fill     *cacheFill
	cached   atomic.Pointer[os.File] // the cache's copy, for ReadAt
	mu       sync.Mutex              // guards cached's opening
	aborted  atomic.Bool
}

// stall cancels a request that makes no progress for a while.
type stall struct {
	ctx    context.Context
	cancel context.CancelFunc
	t      *time.Timer
	d      time.Duration
	fired  atomic.Bool
}

func newStall(d time.Duration) *stall {
	st := &stall{d: d}
	st.ctx, st.cancel = context.WithCancel(context.Background())
	st.t = time.AfterFunc(d, func() {
		st.fired.Store(true)
		st.cancel()
	})
	st.t.Stop()
	return st
}

// arm starts the clock before a call that blocks, disarm stops it.
func (st *stall) arm()    { st.t.Reset(st.d) }
func (st *stall) disarm() { st.t.Stop() }
func (st *stall) close()  { st.t.Stop(); st.cancel() }

// abort ends a read in progress (Verify's ctx was canceled).
func (r *s3Reader) abort() {
	r.aborted.Store(true)
	r.stall.cancel()
}

func (r *s3Reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.pos >= r.size {
		if err := r.check(); err != nil {
			return 0, err
		}
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.size-r.pos)]
	if r.body == nil || r.bodyPos != r.pos {
		if err := r.get(); err != nil {
			return 0, err
		}
	}
	r.stall.arm()
	n, err := r.body.Read(p)
	r.stall.disarm()
	r.bodyPos += int64(n)
	if err == io.EOF && r.pos+int64(n) < r.size {
		// The object is shorter than when it was opened.
		if r.hashed == r.pos {
			r.err = &CorruptError{ID: r.id, Path: r.s.object(r.id)}
			r.fill.abort()
			return 0, r.err
		}
		return 0, fmt.Errorf("store: read blob %s: %w: it shrank in %s", r.id, io.ErrUnexpectedEOF, r.s.where)
	}
	if err != nil && err != io.EOF {
		r.closeBody()
		return 0, r.readError(err)
	}
	if r.hashed == r.pos {
		r.h.Write(p[:n])
		r.hashed += int64(n)
		r.fill.Write(p[:n])
	}
	r.pos += int64(n)
	if r.pos >= r.size {
		if cerr := r.check(); cerr != nil {
			return 0, cerr
		}
	}
	return n, nil
}

// readError names why a read of the object failed.
func (r *s3Reader) readError(err error) error {
	switch {
	case r.aborted.Load():
		return fmt.Errorf("store: read blob %s: %w", r.id, context.Canceled)
	case r.stall.fired.Load():
		return fmt.Errorf("store: read blob %s: %s sent nothing for %v: %w", r.id, r.s.where, r.s.wait, ErrUnreachable)
	}
	return r.s.wrap("read", r.id, err)
}

// get starts a GET of the object from r.pos on.
func (r *s3Reader) get() error {
	r.closeBody()
	if r.aborted.Load() {
		return fmt.Errorf("store: read blob %s: %w", r.id, context.Canceled)
	}
	var opts minio.GetObjectOptions
	if r.pos > 0 {
		if err := opts.SetRange(r.pos, 0); err != nil {
			return fmt.Errorf("store: read blob %s: %w", r.id, err)
		}
	}
	if r.pos == 0 && r.fill == nil && r.hashed == 0 {
		r.fill = r.s.cache.fill()
	}
	r.stall.arm()
	body, _, _, err := minio.Core{Client: r.s.c}.GetObject(r.stall.ctx, r.s.bucket, r.s.key(r.id), opts)
	r.stall.disarm()
	if err != nil {
		return r.readError(err)
	}
	r.body, r.bodyPos = body, r.pos
	return nil
}

func (r *s3Reader) closeBody() {
	if r.body != nil {
		r.body.Close()
		r.body = nil
	}
}

// check compares the hash with the ID once every byte was hashed, and
// caches a sound blob.
func (r *s3Reader) check() error {
	if r.checked || r.hashed != r.size {
		return r.err
	}
	r.checked = true
	if sum := hex.EncodeToString(r.h.Sum(nil)); sum != r.id {
		r.err = &CorruptError{ID: r.id, Path: r.s.object(r.id), Sum: sum}
		r.fill.abort()
		return r.err
	}
	r.fill.commit(r.id, r.etag, r.size)
	r.fill = nil
	return nil
}

func (r *s3Reader) Seek(off int64, whence int) (int64, error) {
	off, err := seekTo(r.id, r.pos, r.size, off, whence)
	if err != nil {
		return 0, err
	}
	if off == 0 && r.hashed != 0 && !r.checked {
		r.h.Reset()
		r.hashed = 0
		r.fill.abort()
		r.fill = nil
	}
	r.pos = off
	return off, nil
}

// ReadAt reads at an offset, without verifying: from the cache's copy if
// there is one, else by a ranged GET. It is safe for concurrent use.
func (r *s3Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("store: read blob %s: negative offset %d", r.id, off)
	}
	if off >= r.size {
		return 0, io.EOF
	}
	if f := r.cachedFile(); f != nil {
		return f.ReadAt(p, off)
	}
	want := p[:min(int64(len(p)), r.size-off)]
	if len(want) == 0 {
		return 0, nil
	}
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+int64(len(want))-1); err != nil {
		return 0, fmt.Errorf("store: read blob %s: %w", r.id, err)
	}
	st := newStall(r.s.wait)
	defer st.close()
	st.arm()
	body, _, _, err := minio.Core{Client: r.s.c}.GetObject(st.ctx, r.s.bucket, r.s.key(r.id), opts)
	st.disarm()
	if err != nil {
		return 0, r.rangeError(st, err)
	}
	defer body.Close()
	n := 0
	for n < len(want) {
		st.arm()
		m, err := body.Read(want[n:])
		st.disarm()
		n += m
		if err == io.EOF {
			if n < len(want) {
				return n, fmt.Errorf("store: read blob %s at %d: %w: it shrank in %s", r.id, off, io.ErrUnexpectedEOF, r.s.where)
			}
			break
		}
		if err != nil {
			return n, r.rangeError(st, err)
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (r *s3Reader) rangeError(st *stall, err error) error {
	if st.fired.Load() {
		return fmt.Errorf("store: read blob %s: %s sent nothing for %v: %w", r.id, r.s.where, r.s.wait, ErrUnreachable)
	}
	return r.s.wrap("read", r.id, err)
}

// cachedFile returns the cache's copy of the blob, opening it once it
// is there.
func (r *s3Reader) cachedFile() *os.File {
	if f := r.cached.Load(); f != nil || r.s.cache == nil {
		return f
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.cached.Load(); f != nil {
		return f
	}
	f, _, ok := r.s.cache.open(r.id, r.etag, r.size)
	if !ok {
		return nil
	}
	r.cached.Store(f)
	return f
}

func (r *s3Reader) Close() error {
	r.closeBody()
	r.stall.close()
	r.fill.abort()
	r.fill = nil
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.cached.Swap(nil); f != nil {
		f.Close()
	}
	return nil
}

// isNotFound reports whether the store said there is no such object.
func isNotFound(err error) bool {
	code := minio.ToErrorResponse(err).Code
	return code == "NoSuchKey" || code == "NotFound"
}

// wrap names what is wrong in an error of the object store: a missing
// object (ErrNotFound), a missing bucket (ErrNoBucket), credentials it
// refuses (ErrDenied) or a store that does not answer (ErrUnreachable).
func (s *S3) wrap(op, id string, err error) error {
	what := op
	if id != "" {
		what = op + " blob " + id
	}
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case "NoSuchKey", "NotFound":
		return fmt.Errorf("store: %s: %w", what, ErrNotFound)
	case "NoSuchBucket":
		return fmt.Errorf("store: %s: bucket %q does not exist at %s: %w; create it or fix the bucket in --blobs", what, s.bucket, s.url, ErrNoBucket)
	case "AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "InvalidToken", "ExpiredToken", "InvalidSecurity", "AllAccessDisabled",
		"XAdminUserNotFound": // VersityGW's unknown access key
		return fmt.Errorf("store: %s: %s refused braid's credentials (%s: %s): %w; check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the credentials file) and the bucket's policy",
			what, s.where, resp.Code, resp.Message, ErrDenied)
	}
	if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized {
		// Stores name refused credentials in their own ways.
		return fmt.Errorf("store: %s: %s refused braid's credentials (%d %s: %s): %w; check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the credentials file) and the bucket's policy",
			what, s.where, resp.StatusCode, resp.Code, resp.Message, ErrDenied)
	}
	if IsNoSpace(err) || resp.Code == "XMinioStorageFull" {
		return fmt.Errorf("store: %s: %w: %w", what, ErrNoSpace, err)
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) ||
		resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusGatewayTimeout {
		return fmt.Errorf("store: %s: the object store %s is unreachable or did not answer (%v): %w; is it running, and is the endpoint in --blobs right?",
			what, s.where, err, ErrUnreachable)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("store: %s: %w", what, err)
	}
	return fmt.Errorf("store: %s: %s: %w", what, s.where, err)
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
