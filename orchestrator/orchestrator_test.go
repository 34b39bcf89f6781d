package orchestrator

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
)

// TestNewRefusesWhatItCannotRun: New names what is missing or wrong
// instead of panicking.
func TestNewRefusesWhatItCannotRun(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	store := blobstore.NewMemory()
	for _, tc := range []struct {
		name  string
		cfg   Config
		rdb   redis.UniversalClient
		store blobstore.Store
		err   string
	}{
		{"no client", Config{}, nil, store, "a Redis client is required"},
		{"no store", Config{}, rdb, nil, "a blob store is required"},
		{"shards", Config{Shards: 3}, rdb, store, "Shards 3: want a power of two"},
		{"negative shards", Config{Shards: -1}, rdb, store, "Shards -1"},
	} {
		_, err := New(tc.cfg, tc.rdb, tc.store, nil, nil, nil)
		require.ErrorContains(t, err, tc.err, tc.name)
	}
	o, err := New(Config{Shards: 4}, rdb, store, nil, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 4, o.Shards())
}
