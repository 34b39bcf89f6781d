package redisfn

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// RunOn runs s as Run does, but sends it on on (one connection, or a
// pipeline on one: what a command after it, such as WAIT, must share),
// loading the library through c when the server does not know it. A
// pipeline's command is not sent until the pipeline runs: a function the
// server lacks fails there, and the caller runs the pipeline again after
// Load.
func (s *Script) RunOn(ctx context.Context, c *Client, on redis.Cmdable, keys []string, args ...any) *redis.Cmd {
	if c.evalOnly.Load() {
		if sc, ok := on.(redis.Scripter); ok {
			return s.eval.EvalSha(ctx, sc, keys, args...)
		}
	}
	return on.FCall(ctx, s.fn, keys, args...)
}

// Load loads s's library on c's servers (Run does it by itself; a caller
// of RunOn whose call found the function missing does it, then calls
// again), or the script for EVALSHA where the server has no Functions.
func (s *Script) Load(ctx context.Context, c *Client) error {
	if c.evalOnly.Load() {
		return eachServer(ctx, c, func(ctx context.Context, m redis.Cmdable) error {
			return s.eval.Load(ctx, m.(redis.Scripter)).Err()
		})
	}
	return s.load(ctx, c)
}

// Missing reports whether err is a call of a function (or script) the
// server has not loaded.
func Missing(err error) bool {
	return notFound(err) || redis.HasErrorPrefix(err, "NOSCRIPT")
}
