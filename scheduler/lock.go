package scheduler

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base32"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/keyspace"
)

// TickLockKey is the lock of one tick of one entry: the scheduler process
// that creates it (SET NX) starts the tick's thread; every other process
// sees it taken.
func TickLockKey(ks keyspace.Space, entryID string, tick time.Time) string {
	return ks.Lock("schedule:" + entryID + ":" + strconv.FormatInt(tick.UnixMilli(), 10))
}

// HousekeepingLockKey is held by the scheduler process running a
// housekeeping pass, so that a fleet of schedulers does one pass at a time.
func HousekeepingLockKey(ks keyspace.Space) string { return ks.Lock("housekeeping") }

// TickThreadID is the id of the thread an entry starts for a tick: the
// spec's "{directive}-{epoch}" shape with the tick's second, and a suffix
// derived from the entry id and the tick, so that the registry itself
// refuses a second thread for the same tick.
func TickThreadID(directiveName, entryID string, tick time.Time) string {
	sum := sha256.Sum256([]byte(entryID + "\x00" + strconv.FormatInt(tick.UnixMilli(), 10)))
	suffix := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:]))
	return fmt.Sprintf("%s-%d-%s", directiveName, tick.Unix(), suffix[:10])
}

// TickIdempotencyKey is the idempotency key of the start of an entry's
// tick, "schedule:<entry>:<tick RFC 3339>": the run's record carries it
// beside the tick's thread id, and the key names that run for its
// tenant as any start's key does.
func TickIdempotencyKey(entryID string, tick time.Time) string {
	return "schedule:" + entryID + ":" + tick.UTC().Format(time.RFC3339)
}

// acquire takes the lock key for ttl under token; false when another
// holder has it.
func acquire(ctx context.Context, rdb redis.UniversalClient, key, token string, ttl time.Duration) (bool, error) {
	err := rdb.SetArgs(ctx, key, token, redis.SetArgs{Mode: "NX", TTL: ttl}).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, nil
}

// acquireOwnScript takes a lock that is free or under the caller's own
// token (acquire_lock.lua).
var acquireOwnScript = redisfn.New("acquire_lock", "", acquireOwnLua)

//go:embed acquire_lock.lua
var acquireOwnLua string

// acquireOwn is acquire for a holder that never holds key twice at once
// (a process's housekeeping passes run one at a time): the lock found
// under its own token is one whose release was lost, and it takes it
// again, where acquire would wait out the TTL (a minute without
// housekeeping after every failover that kept a pass's lock and lost its
// release).
func acquireOwn(ctx context.Context, rdb *redisfn.Client, key, token string, ttl time.Duration) (bool, error) {
	n, err := acquireOwnScript.Run(ctx, rdb, []string{key}, token, ttl.Milliseconds()).Int64()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// releaseScript deletes a lock only if it is still held by the caller
// (release_lock.lua).
var releaseScript = redisfn.New("release_lock", "", releaseLua)

//go:embed release_lock.lua
var releaseLua string

func release(ctx context.Context, rdb *redisfn.Client, key, token string) error {
	return releaseScript.Run(ctx, rdb, []string{key}, token).Err()
}
