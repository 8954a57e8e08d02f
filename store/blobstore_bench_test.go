package store

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// BenchmarkBlobStore compares the blob stores side by side: Put (a synced
// Disk, as uploads are; an S3 store on BRAID_TEST_S3, VersityGW on
// loopback in CI), Get (a whole read, verified as it goes) and ReadAt
// (64 KiB at random offsets, as units read their data), for 1 MiB and
// 64 MiB blobs. s3+cache reads through a warm read-through cache.
//
//	BRAID_TEST_S3=http://KEY:SECRET@127.0.0.1:7070 go test -run '^$' -bench BlobStore ./store/
func BenchmarkBlobStore(b *testing.B) {
	kinds := []struct {
		name string
		open func(b *testing.B) BlobStore
	}{
		{"disk", func(b *testing.B) BlobStore {
			d, err := OpenDisk(b.TempDir(), nil)
			if err != nil {
				b.Fatal(err)
			}
			return d
		}},
		{"s3", func(b *testing.B) BlobStore { s, _ := newS3(b, 0); return s }},
		{"s3+cache", func(b *testing.B) BlobStore { s, _ := newS3(b, 1<<30); return s }},
	}
	for _, size := range []int64{1 << 20, 64 << 20} {
		for _, k := range kinds {
			b.Run(fmt.Sprintf("op=put/size=%dMiB/store=%s", size>>20, k.name), func(b *testing.B) {
				if k.name == "s3+cache" {
					b.Skip("the same puts as s3, plus a local copy")
				}
				bs := k.open(b)
				b.SetBytes(size)
				var n uint64
				for b.Loop() {
					n++
					id, _, err := bs.Put(b.Context(), seqReader(n, size))
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if err := bs.Delete(id); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
			b.Run(fmt.Sprintf("op=get/size=%dMiB/store=%s", size>>20, k.name), func(b *testing.B) {
				bs := k.open(b)
				id, _, err := bs.Put(b.Context(), seqReader(0, size))
				if err != nil {
					b.Fatal(err)
				}
				buf := make([]byte, 256<<10)
				b.SetBytes(size)
				for b.Loop() {
					r, _, err := bs.Open(id)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := io.CopyBuffer(io.Discard, onlyReader{r}, buf); err != nil {
						b.Fatal(err)
					}
					r.Close()
				}
			})
			b.Run(fmt.Sprintf("op=readat64KiB/size=%dMiB/store=%s", size>>20, k.name), func(b *testing.B) {
				bs := k.open(b)
				id, _, err := bs.Put(b.Context(), seqReader(0, size))
				if err != nil {
					b.Fatal(err)
				}
				r, _, err := bs.Open(id)
				if err != nil {
					b.Fatal(err)
				}
				defer r.Close()
				p := make([]byte, 64<<10)
				rng := rand.New(rand.NewPCG(1, 2))
				b.SetBytes(int64(len(p)))
				for b.Loop() {
					off := rng.Int64N(size - int64(len(p)))
					if _, err := r.ReadAt(p, off); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// onlyReader hides a reader's other methods, so io.Copy reads it.
type onlyReader struct{ io.Reader }

// seqReader yields size bytes whose first 8 are n: each Put stores a new
// blob.
func seqReader(n uint64, size int64) io.Reader {
	var head [8]byte
	binary.LittleEndian.PutUint64(head[:], n)
	return io.MultiReader(strings.NewReader(string(head[:])), io.LimitReader(zeros{}, size-8))
}
