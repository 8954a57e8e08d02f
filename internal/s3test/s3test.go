// Package s3test gives tests a bucket of their own in a real
// S3-compatible object store, named by BRAID_TEST_S3:
//
//	BRAID_TEST_S3=http://ACCESS_KEY:SECRET_KEY@127.0.0.1:7070
//
// an endpoint URL (https:// for TLS) with the credentials as its user
// and password, optionally ?region=R. .ci/run starts VersityGW (from
// tools/s3gw) on loopback and sets it. Each New creates a uniquely named
// bucket and removes it, with everything in it, when the test ends.
// Without BRAID_TEST_S3 the test is skipped with the reason; with
// BRAID_REQUIRE_S3=1 it fails instead.
package s3test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Env is the variable that names the object store.
const Env = "BRAID_TEST_S3"

// Bucket is a fresh bucket for one test.
type Bucket struct {
	// Name is the bucket's name.
	Name string
	// Endpoint is the store's HOST:PORT; Secure says it speaks TLS.
	Endpoint string
	Secure   bool
	// AccessKey, SecretKey and Region are what the store takes.
	AccessKey, SecretKey, Region string
	// Client talks to the store as the test's owner, to look behind a
	// blob store's back.
	Client *minio.Client
}

// Server returns the store of BRAID_TEST_S3, skipping (or, with
// BRAID_REQUIRE_S3=1, failing) the test if it is not set.
func Server(t testing.TB) (endpoint string, secure bool, access, secret, region string) {
	t.Helper()
	v := os.Getenv(Env)
	if v == "" {
		msg := Env + " is not set: set it to an S3-compatible endpoint with credentials, e.g. " +
			"http://ACCESS:SECRET@127.0.0.1:7070 (.ci/run starts VersityGW from tools/s3gw and sets it)"
		if os.Getenv("BRAID_REQUIRE_S3") == "1" {
			t.Fatal(msg + "; BRAID_REQUIRE_S3=1 requires it")
		}
		t.Skip(msg)
	}
	u, err := url.Parse(v)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.User == nil {
		t.Fatalf("%s=%q: want http://ACCESS:SECRET@HOST:PORT (https:// for TLS)", Env, v)
	}
	secret, _ = u.User.Password()
	return u.Host, u.Scheme == "https", u.User.Username(), secret, u.Query().Get("region")
}

// New creates a bucket for the test and removes it when the test ends.
func New(t testing.TB) *Bucket {
	t.Helper()
	b := &Bucket{}
	b.Endpoint, b.Secure, b.AccessKey, b.SecretKey, b.Region = Server(t)
	var err error
	b.Client, err = minio.New(b.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(b.AccessKey, b.SecretKey, ""),
		Secure:       b.Secure,
		Region:       b.Region,
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Name = "braid-test-" + strings.ToLower(rand.Text()[:20])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Client.MakeBucket(ctx, b.Name, minio.MakeBucketOptions{Region: b.Region}); err != nil {
		t.Fatalf("create bucket %s at %s: %v", b.Name, b.Endpoint, err)
	}
	t.Cleanup(func() {
		if err := b.remove(); err != nil {
			t.Errorf("remove bucket %s: %v", b.Name, err)
		}
	})
	return b
}

// remove empties the bucket and deletes it.
func (b *Bucket) remove() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for obj := range b.Client.ListObjectsIter(ctx, b.Name, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			return obj.Err
		}
		if err := b.Client.RemoveObject(ctx, b.Name, obj.Key, minio.RemoveObjectOptions{}); err != nil {
			return err
		}
	}
	for up := range b.Client.ListIncompleteUploads(ctx, b.Name, "", true) {
		if up.Err != nil {
			break // not every store lists them
		}
		b.Client.RemoveIncompleteUpload(ctx, b.Name, up.Key)
	}
	return b.Client.RemoveBucket(ctx, b.Name)
}

// URL returns the store's endpoint URL, http://HOST:PORT or https://.
func (b *Bucket) URL() string {
	if b.Secure {
		return "https://" + b.Endpoint
	}
	return "http://" + b.Endpoint
}

// Spec returns the blob store spec of prefix in the bucket, for --blobs.
func (b *Bucket) Spec(prefix string) string {
	q := url.Values{"endpoint": {b.URL()}}
	if b.Region != "" {
		q.Set("region", b.Region)
	}
	return fmt.Sprintf("s3://%s/%s?%s", b.Name, prefix, q.Encode())
}

// Setenv gives the process the bucket's credentials, as AWS_* variables,
// for the test.
func (b *Bucket) Setenv(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", b.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", b.SecretKey)
	t.Setenv("AWS_SESSION_TOKEN", "")
	if b.Region != "" {
		t.Setenv("AWS_REGION", b.Region)
	}
}

// Keys lists the keys in the bucket under prefix.
func (b *Bucket) Keys(t testing.TB, prefix string) []string {
	t.Helper()
	var keys []string
	for obj := range b.Client.ListObjectsIter(t.Context(), b.Name, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		keys = append(keys, obj.Key)
	}
	return keys
}
