package luabatch

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// incr adds ARGV[1] to KEYS[1] and replies {"OK", new} or {"NEG"} when
// ARGV[1] is negative (nothing written).
var incr = NewScript("incr", `
if tonumber(ARGV[1]) < 0 then return {'NEG'} end
return {'OK', redis.call('INCRBY', KEYS[1], ARGV[1])}
`)

// keysArgs replies with its KEYS and ARGV as they arrived, and their sizes.
var keysArgs = NewScript("keys_args", `
return {#KEYS, #ARGV, KEYS, ARGV}
`)

// bare returns a bare value or nothing.
var bare = NewScript("bare", `
if ARGV[1] == 'nil' then return end
return redis.call('GET', KEYS[1])
`)

func TestRunStepsInOrderWithTheirOwnKeysAndArgs(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	ctx := context.Background()
	k := "{" + r.Namespace + "}:"
	res, err := Run(ctx, r.Client,
		Step{Script: incr, Keys: []string{k + "a"}, Args: []any{5}, Proceed: []string{"OK"}},
		Step{Script: keysArgs, Keys: []string{k + "x", k + "y"}, Args: []any{"p", 7, "q"}},
		Step{Script: keysArgs},
		Step{Script: incr, Keys: []string{k + "a"}, Args: []any{2}},
	)
	require.NoError(t, err)
	require.Equal(t, []any{
		[]any{"OK", int64(5)},
		[]any{int64(2), int64(3), []any{k + "x", k + "y"}, []any{"p", "7", "q"}},
		[]any{int64(0), int64(0), []any{}, []any{}},
		[]any{"OK", int64(7)},
	}, res)

	// The same script alone gives the same replies.
	alone, err := keysArgs.Run(ctx, r.Client, []string{k + "x", k + "y"}, "p", 7, "q").Slice()
	require.NoError(t, err)
	require.Equal(t, res[1], alone)
}

func TestStepStopsTheBatch(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	ctx := context.Background()
	k := "{" + r.Namespace + "}:"
	res, err := Run(ctx, r.Client,
		Step{Script: incr, Keys: []string{k + "a"}, Args: []any{1}, Proceed: []string{"OK"}},
		Step{Script: incr, Keys: []string{k + "a"}, Args: []any{-1}, Proceed: []string{"OK"}},
		Step{Script: incr, Keys: []string{k + "a"}, Args: []any{100}},
	)
	require.NoError(t, err)
	require.Equal(t, []any{[]any{"OK", int64(1)}, []any{"NEG"}}, res)
	v, err := r.Client.Get(ctx, k+"a").Int()
	require.NoError(t, err)
	require.Equal(t, 1, v, "the step after the stop did not run")

	// Several codes may let the batch on; a bare reply is its own code.
	require.NoError(t, r.Client.Set(ctx, k+"b", "go", 0).Err())
	res, err = Run(ctx, r.Client,
		Step{Script: incr, Keys: []string{k + "a"}, Args: []any{-1}, Proceed: []string{"OK", "NEG"}},
		Step{Script: bare, Keys: []string{k + "b"}, Args: []any{"get"}, Proceed: []string{"go"}},
		Step{Script: bare, Keys: []string{k + "b"}, Args: []any{"nil"}},
		Step{Script: incr, Keys: []string{k + "a"}, Args: []any{1}},
	)
	require.NoError(t, err)
	require.Len(t, res, 4)
	require.Equal(t, "go", res[1])
	require.Nil(t, res[2], "a step that returns nothing replies nil")
	require.Equal(t, []any{"OK", int64(2)}, res[3])
}

func TestRedisErrorAbortsTheBatch(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	ctx := context.Background()
	k := "{" + r.Namespace + "}:"
	require.NoError(t, r.Client.Set(ctx, k+"s", "not a number", 0).Err())
	_, err := Run(ctx, r.Client,
		Step{Script: incr, Keys: []string{k + "a"}, Args: []any{1}},
		Step{Script: incr, Keys: []string{k + "s"}, Args: []any{1}},
		Step{Script: incr, Keys: []string{k + "a"}, Args: []any{1}},
	)
	require.Error(t, err)
	v, err := r.Client.Get(ctx, k+"a").Int()
	require.NoError(t, err)
	require.Equal(t, 1, v, "the steps before the error stay, the ones after it did not run")

	// An op alone: its reader's verdict, or the script's failure wrapped.
	var got any
	read := func(reply any) error { got = reply; return nil }
	require.NoError(t, Op{Step: Step{Script: incr, Keys: []string{k + "a"}, Args: []any{2}}, Read: read}.Run(ctx, r.Client, "incr a"))
	require.Equal(t, []any{"OK", int64(3)}, got)
	err = Op{Step: Step{Script: incr, Keys: []string{k + "s"}, Args: []any{1}}, Read: read}.Run(ctx, r.Client, "incr s")
	require.ErrorContains(t, err, "incr s: ")
}

func TestComposeIsCachedPerSequence(t *testing.T) {
	a := signature([]Step{{Script: incr, Proceed: []string{"OK"}}, {Script: bare}})
	b := signature([]Step{{Script: incr}, {Script: bare}})
	c := signature([]Step{{Script: bare}, {Script: incr, Proceed: []string{"OK"}}})
	require.NotEqual(t, a, b)
	require.NotEqual(t, a, c)
	src := compose([]Step{{Script: incr}, {Script: incr}, {Script: bare}})
	require.Equal(t, 1, countOf(src, "local function step_incr_"), "a script used twice is defined once")
	require.Equal(t, `'it\'s\\ \010'`, luaString("it's\\ \n"))
	require.Panics(t, func() { NewScript("not-an-identifier", "return 1") })
}

func countOf(s, sub string) int {
	n := 0
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			n++
		}
	}
	return n
}
