package redisfn_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/spool-run/spool/internal/autopipe"
	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// prelude defines, once per library, what the bodies call.
const prelude = `
local lib = {}
do
  function lib.bump(keys, argv)
    local n = redis.call('HINCRBY', keys[1], 'n', tonumber(argv[1]))
    if n > 10 then return redis.error_reply('TOOMANY ' .. n) end
    return {n, argv[2]}
  end
end`

// newScript is a script unique to one test, so that each test loads its
// own library (the name carries a hash of the code).
func newScript(t *testing.T) *redisfn.Script {
	return redisfn.New("test", prelude+"\n-- "+testenv.RandomID(8), "return lib.bump(KEYS, ARGV)")
}

// withFunctions runs test on each topology, with Functions: the embedded
// Redis has none (TestEmbeddedRedisRunsScripts, TestPruneWithoutFunctions).
func withFunctions(t *testing.T, test func(t *testing.T, r *testenv.Redis)) {
	for _, top := range testenv.Topologies {
		t.Run(string(top), func(t *testing.T) {
			r := testenv.NewRedisOn(t, top)
			if r.Embedded {
				t.Skip("the embedded Redis has no Functions")
			}
			test(t, r)
		})
	}
}

// masters are the clients of the servers that hold keys: each master of
// a Cluster, else the one server.
func masters(t *testing.T, r *testenv.Redis) []*redis.Client {
	if cc, ok := r.Universal.(*redis.ClusterClient); ok {
		var (
			mu  sync.Mutex
			out []*redis.Client
		)
		require.NoError(t, cc.ForEachMaster(t.Context(), func(_ context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			out = append(out, m)
			return nil
		}))
		return out
	}
	return []*redis.Client{r.Client}
}

func loaded(t *testing.T, c *redis.Client, s *redisfn.Script) bool {
	libs, err := c.FunctionList(t.Context(), redis.FunctionListQuery{LibraryNamePattern: s.Name()}).Result()
	require.NoError(t, err)
	return len(libs) == 1
}

// TestRunLoadsTheLibraryOnEveryMaster runs a script as a Function on each
// topology, through the auto-pipeliner spool's scripts use: the first
// call loads the library (on every master of a Cluster, so that keys of
// any slot find it), replies and refusals are a script's, and a server
// that lost its functions (a restart without persistence, FUNCTION
// FLUSH) gets the library again on the next call.
func TestRunLoadsTheLibraryOnEveryMaster(t *testing.T) {
	withFunctions(t, func(t *testing.T, r *testenv.Redis) {
		c := redisfn.NewClient(autopipe.Wrap(r.Universal))
		s := newScript(t)
		// Keys of three hash tags: on a Cluster, three slots that
		// CRC16 puts on different masters.
		keys := []string{r.Namespace + ":{a}", r.Namespace + ":{b}", r.Namespace + ":{c}"}
		for _, k := range keys {
			got, err := s.Run(t.Context(), c, []string{k}, 4, "x").Slice()
			require.NoError(t, err)
			require.Equal(t, []any{int64(4), "x"}, got)
		}
		require.False(t, c.EvalOnly(), "Redis 7 runs the script as a Function")
		for _, m := range masters(t, r) {
			require.True(t, loaded(t, m, s), "the library on %s", m.Options().Addr)
		}

		got, err := s.Run(t.Context(), c, keys[:1], 4, "y").Slice()
		require.NoError(t, err)
		require.Equal(t, []any{int64(8), "y"}, got)
		_, err = s.Run(t.Context(), c, keys[:1], 4, "z").Result()
		require.EqualError(t, err, "TOOMANY 12", "a refusal comes back as the script gave it")

		for _, m := range masters(t, r) {
			require.NoError(t, m.FunctionDelete(t.Context(), s.Name()).Err())
		}
		got, err = s.Run(t.Context(), c, keys[1:2], -4, "again").Slice()
		require.NoError(t, err)
		require.Equal(t, []any{int64(0), "again"}, got)
		require.False(t, c.EvalOnly())
	})
}

// TestEmbeddedRedisRunsScripts: where Redis has no FCALL (miniredis,
// Redis 6), the client runs the same code as one script, with the same
// replies and refusals, and does not ask for Functions again.
func TestEmbeddedRedisRunsScripts(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c := redisfn.NewClient(rdb)
	s := newScript(t)
	got, err := s.Run(t.Context(), c, []string{"k"}, 6, "x").Slice()
	require.NoError(t, err)
	require.Equal(t, []any{int64(6), "x"}, got)
	require.True(t, c.EvalOnly())
	_, err = s.Run(t.Context(), c, []string{"k"}, 6, "x").Result()
	require.EqualError(t, err, "TOOMANY 12")
	require.Equal(t, "12", m.HGet("k", "n"))
}

// TestLibraryCode: the library names itself and its one function after
// a hash of the code, and the prelude stands outside the function, so
// FUNCTION LOAD runs it once.
func TestLibraryCode(t *testing.T) {
	s := redisfn.New("commit", "local x = {}", "return 1")
	require.Regexp(t, `^spool_commit_[0-9a-f]{12}$`, s.Name())
	lib := s.Library()
	require.True(t, strings.HasPrefix(lib, "#!lua name="+s.Name()+"\nlocal x = {}\n"), lib)
	require.Contains(t, lib, "redis.register_function('"+s.Name()+"', function(KEYS, ARGV)\nreturn 1\nend)")
	require.NotEqual(t, s.Name(), redisfn.New("commit", "local x = {}", "return 2").Name())
}

// loadCounter counts the FUNCTION LOADs a client sends.
type loadCounter struct{ n atomic.Int64 }

func (*loadCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (*loadCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *loadCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && cmd.Name() == "function" && fmt.Sprint(args[1]) == "load" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// TestFirstCallsLoadOnce: the many first calls of a fleet that all find
// the function missing load the library once, not once each.
func TestFirstCallsLoadOnce(t *testing.T) {
	r := testenv.NewRedis(t)
	if r.Embedded {
		t.Skip("the embedded Redis has no Functions")
	}
	rdb := redis.NewClient(r.Client.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	var loads loadCounter
	rdb.AddHook(&loads)
	c := redisfn.NewClient(rdb)
	s := newScript(t)
	var g errgroup.Group
	for i := range 64 {
		g.Go(func() error {
			return s.Run(t.Context(), c, []string{fmt.Sprintf("%s:{%d}", r.Namespace, i)}, 1, "x").Err()
		})
	}
	require.NoError(t, g.Wait())
	require.Equal(t, int64(1), loads.n.Load())
	require.False(t, c.EvalOnly())
}

// TestRefusedLoadRunsScripts: a server that refuses FUNCTION LOAD (an ACL
// without it) gets the script by EVALSHA from then on, with the same
// reply.
func TestRefusedLoadRunsScripts(t *testing.T) {
	r := testenv.NewRedis(t)
	if r.Embedded {
		t.Skip("the embedded Redis has no ACL")
	}
	user := "spool-test-" + testenv.RandomID(6)
	require.NoError(t, r.Client.Do(t.Context(), "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-function").Err())
	t.Cleanup(func() { _ = r.Client.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	opt := *r.Client.Options()
	opt.Username, opt.Password = user, "pw"
	rdb := redis.NewClient(&opt)
	t.Cleanup(func() { _ = rdb.Close() })
	c := redisfn.NewClient(rdb)
	s := newScript(t)
	got, err := s.Run(t.Context(), c, []string{r.Namespace + ":k"}, 3, "x").Slice()
	require.NoError(t, err)
	require.Equal(t, []any{int64(3), "x"}, got)
	require.True(t, c.EvalOnly(), "refused, the client stops asking for Functions")
}

// TestPruneDeletesUnusedLibraries: housekeeping's Prune deletes, on every
// master, the libraries no process has used for the time given, enters
// the ones it has no record of as seen now, drops records whose library
// is gone, leaves the rest; a process still calling a deleted library
// loads it again on its next call. (Prune runs as of a week ahead, on
// libraries of this test's own prefix: other tests' pruners, as of now,
// leave them alone, and it leaves theirs.)
func TestPruneDeletesUnusedLibraries(t *testing.T) {
	withFunctions(t, func(t *testing.T, r *testenv.Redis) {
		ctx := t.Context()
		c := redisfn.NewClient(autopipe.Wrap(r.Universal))
		name := "prune" + testenv.RandomID(6)
		prefix := redisfn.Prefix + name
		script := func(v string) *redisfn.Script {
			return redisfn.New(name, prelude+"\n-- "+v, "return lib.bump(KEYS, ARGV)")
		}
		old, cur, untracked := script("old"), script("cur"), script("untracked")
		gone, recent := prefix+"_gone", prefix+"_recent"
		t.Cleanup(func() {
			_ = r.Universal.HDel(context.Background(), keyspace.FunctionsSeen,
				old.Name(), cur.Name(), untracked.Name(), gone, recent).Err()
		})
		now := time.Now()
		for _, s := range []*redisfn.Script{old, cur} {
			require.NoError(t, s.Run(ctx, c, []string{r.Namespace + ":{a}"}, 1, "x").Err())
			at, err := r.Universal.HGet(ctx, keyspace.FunctionsSeen, s.Name()).Int64()
			require.NoError(t, err, "a call records that the library is used")
			require.InDelta(t, now.Unix(), at, 60)
		}
		week := 7 * 24 * time.Hour
		later := now.Add(week + 24*time.Hour) // old, last used now, is a week and a day unused
		require.NoError(t, r.Universal.HSet(ctx, keyspace.FunctionsSeen,
			cur.Name(), later.Unix(), gone, now.Unix(), recent, later.Unix()).Err())
		for _, m := range masters(t, r) {
			require.NoError(t, m.FunctionLoad(ctx, untracked.Library()).Err())
		}

		deleted, err := redisfn.Prune(ctx, c, prefix, week, later)
		require.NoError(t, err)
		require.Equal(t, []string{old.Name()}, deleted)
		for _, m := range masters(t, r) {
			require.False(t, loaded(t, m, old), "deleted on %s", m.Options().Addr)
			require.True(t, loaded(t, m, cur), "used within the week: kept on %s", m.Options().Addr)
			require.True(t, loaded(t, m, untracked), "no record yet: kept on %s", m.Options().Addr)
		}
		seen, err := r.Universal.HMGet(ctx, keyspace.FunctionsSeen, old.Name(), untracked.Name(), gone, recent).Result()
		require.NoError(t, err)
		require.Nil(t, seen[0], "the deleted library's record goes with it")
		require.Equal(t, strconv.FormatInt(later.Unix(), 10), seen[1], "an untracked library counts as seen now")
		require.Nil(t, seen[2], "a record whose library is gone is dropped after the week")
		require.NotNil(t, seen[3], "a recent record without a library stays")

		again, err := redisfn.Prune(ctx, c, prefix, week, later.Add(week-time.Minute))
		require.NoError(t, err)
		require.Empty(t, again, "nothing else is a week unused yet")

		got, err := old.Run(ctx, c, []string{r.Namespace + ":{b}"}, 2, "back").Slice()
		require.NoError(t, err, "a process still on the deleted library loads it again")
		require.Equal(t, []any{int64(2), "back"}, got)
		for _, m := range masters(t, r) {
			require.True(t, loaded(t, m, old))
		}
		_, err = redisfn.Prune(ctx, c, prefix, 0, now)
		require.ErrorContains(t, err, "must be positive")
	})
}

// TestPruneWithoutFunctions: a server without Functions (miniredis,
// Redis 6) has nothing to prune.
func TestPruneWithoutFunctions(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	deleted, err := redisfn.Prune(t.Context(), c, redisfn.Prefix, time.Hour, time.Now())
	require.NoError(t, err)
	require.Empty(t, deleted)
}

// TestClientKeepsItsOwnState: what a client learned of its server is its
// own (nothing global outlives it), and the packages given one Client
// share it.
func TestClientKeepsItsOwnState(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c := redisfn.NewClient(rdb)
	require.Same(t, c, redisfn.NewClient(c), "a Client is shared, not wrapped again")
	require.Nil(t, redisfn.NewClient(nil))
	require.NoError(t, newScript(t).Run(t.Context(), c, []string{"k"}, 1, "x").Err())
	require.True(t, c.EvalOnly())
	require.False(t, redisfn.NewClient(rdb).EvalOnly(), "another Client over the same client starts afresh")
}
