package server

import (
	"context"
	"path/filepath"

	"github.com/braid-hpc/braid/store"
)

// defaultBlobCache is the read-through cache of an S3 blob store when
// Config.BlobCache is zero.
const defaultBlobCache = 2 << 30

// openBlobs opens the blob store of cfg: Config.Blobs, or the directory
// Data/blobs. An object store's read-through cache is Data/blobcache.
func openBlobs(ctx context.Context, cfg *Config) (store.BlobStore, error) {
	spec := cfg.Blobs
	if spec == "" {
		spec = "dir:" + filepath.Join(cfg.Data, "blobs")
	}
	bc := &store.BlobStoreConfig{Logger: cfg.Logger}
	if cfg.BlobCache >= 0 {
		bc.CacheDir = filepath.Join(cfg.Data, "blobcache")
		bc.CacheSize = cfg.BlobCache
		if bc.CacheSize == 0 {
			bc.CacheSize = defaultBlobCache
		}
	}
	b, err := store.OpenBlobStore(ctx, spec, bc)
	if err != nil {
		return nil, err
	}
	if cfg.Blobs != "" {
		cfg.Logger.Info("blob store opened", "blobs", b.String(), "bytes", b.Used())
	}
	return b, nil
}
