package testenv

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Snapshot is what Redis held of one test's namespace at a moment: every
// key naming the namespace (spool's keys and its asynq queues'), dumped
// with its time to live. Rollback makes Redis lose every write since, as
// Redis does when it restarts short of its last writes or fails over to a
// replica that had not received them: a suffix of its history, on a
// server other tests share.
type Snapshot struct {
	r     *Redis
	at    time.Time
	dumps map[string]dump
}

type dump struct {
	val string
	ttl time.Duration // 0: none
}

// Snapshot dumps the keys of r's namespace.
func (r *Redis) Snapshot(t testing.TB) *Snapshot {
	t.Helper()
	ctx := context.Background()
	s := &Snapshot{r: r, at: time.Now(), dumps: map[string]dump{}}
	var mu sync.Mutex
	err := r.eachServer(ctx, func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, "*"+r.Namespace+"*", 500).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			val, err := c.Dump(ctx, k).Result()
			if errors.Is(err, redis.Nil) {
				continue // gone since the scan
			}
			if err != nil {
				return err
			}
			ttl, err := c.PTTL(ctx, k).Result()
			if err != nil {
				return err
			}
			if ttl < 0 {
				ttl = 0
			}
			mu.Lock()
			s.dumps[k] = dump{val: val, ttl: ttl}
			mu.Unlock()
		}
		return iter.Err()
	})
	if err != nil {
		t.Fatalf("testenv: snapshot of namespace %s: %v", r.Namespace, err)
	}
	return s
}

// Keys is the number of keys the snapshot holds.
func (s *Snapshot) Keys() int { return len(s.dumps) }

// Rollback deletes every key of the namespace and restores those of the
// snapshot, each with the time to live it had then less the time since
// (a key that would have expired meanwhile is not restored).
func (s *Snapshot) Rollback(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	r := s.r
	err := r.eachServer(ctx, func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, "*"+r.Namespace+"*", 500).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	})
	if err != nil {
		t.Fatalf("testenv: roll back namespace %s: %v", r.Namespace, err)
	}
	since := time.Since(s.at)
	for k, d := range s.dumps {
		ttl := d.ttl
		if ttl > 0 {
			if ttl -= since; ttl <= 0 {
				continue
			}
		}
		if err := r.Universal.RestoreReplace(ctx, k, ttl, d.val).Err(); err != nil {
			t.Fatalf("testenv: roll back %s: %v", k, err)
		}
	}
}

// eachServer runs f on the server (every master of a Cluster).
func (r *Redis) eachServer(ctx context.Context, f func(context.Context, *redis.Client) error) error {
	switch c := r.Universal.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, f)
	case *redis.Client:
		return f(ctx, c)
	}
	return errors.New("testenv: a Redis client of an unknown kind")
}
