package blobstore_test

import (
	"context"
	"testing"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/blobstore/blobstoretest"
	"github.com/spool-run/spool/internal/testing/testenv"
)

func TestMain(m *testing.M) { testenv.MainLeakFree(m) }

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	blobstoretest.Run(t, func(t *testing.T) blobstore.Store { return blobstore.NewMemory() })
}

// TestLocalConformance runs the conformance suite on both ways Local
// opens paths (localImpls).
func TestLocalConformance(t *testing.T) {
	t.Parallel()
	for impl, newLocal := range localImpls {
		t.Run(impl, func(t *testing.T) {
			t.Parallel()
			blobstoretest.Run(t, func(t *testing.T) blobstore.Store {
				s, err := newLocal(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				return s
			})
		})
	}
}

// newS3 returns an S3 store on the test server (versitygw) under a fresh
// random prefix, or skips when there is none.
func newS3(t testing.TB) *blobstore.S3 {
	env := testenv.NewS3(t)
	s, err := blobstore.NewS3(context.Background(), blobstore.S3Config{
		Endpoint: env.Endpoint, Bucket: env.Bucket, Region: env.Region, PathStyle: true,
		Prefix: env.Prefix, AccessKey: env.AccessKey, SecretKey: env.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestS3Conformance(t *testing.T) {
	t.Parallel()
	blobstoretest.Run(t, func(t *testing.T) blobstore.Store { return newS3(t) })
}
