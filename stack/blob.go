package stack

import (
	"context"
	"os"
	"path/filepath"

	"github.com/spool-run/spool/blobstore"
)

// OpenBlobStore opens S3-compatible storage when SPOOL_S3_BUCKET is set,
// else a local directory under dataDir/blobs.
func OpenBlobStore(ctx context.Context, dataDir string) (blobstore.Store, error) {
	if os.Getenv("SPOOL_S3_BUCKET") != "" {
		cfg, err := blobstore.S3ConfigFromEnv()
		if err != nil {
			return nil, err
		}
		return blobstore.NewS3(ctx, cfg)
	}
	return blobstore.NewLocal(filepath.Join(dataDir, "blobs"))
}
