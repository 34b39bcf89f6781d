// Package autopipe gives spool's own Redis scripts go-redis's blocking
// auto-pipeliner. It is a leaf (go-redis only), so the orchestrator gets
// it without package stack and the embedded Redis stack carries.
package autopipe

import (
	"github.com/redis/go-redis/v9"
)

// Client is the auto-pipeliner of a Redis client, which it keeps for
// Unwrap.
type Client struct {
	*redis.AutoPipeliner
	rdb redis.UniversalClient
}

// Wrap returns rdb's blocking auto-pipeliner where the client has one
// (standalone, Sentinel, Cluster), else rdb. Spool's registry,
// activations and ledger run many small scripts from many goroutines at
// once (a worker runs Concurrency activations): the auto-pipeliner sends
// the commands of concurrent callers together on one held connection, a
// writer and a reader streaming in full duplex, so each caller still makes
// one FCALL and gets its own reply, in its own order, but the process
// makes a fraction of the syscalls and no caller waits for another's batch
// (BENCHMARKS.md: about twice the ledger cycles per second of a pooled
// client). Blocking and subscribe commands go to the pool as before. The
// pipeliner is owned by rdb: closing rdb closes it.
func Wrap(rdb redis.UniversalClient) redis.UniversalClient {
	type autoPipeliner interface {
		AutoPipelineWithOptions(*redis.AutoPipelineOptions) (*redis.AutoPipeliner, error)
	}
	if c, ok := rdb.(autoPipeliner); ok {
		if ap, err := c.AutoPipelineWithOptions(&redis.AutoPipelineOptions{FullDuplex: true}); err == nil {
			return &Client{AutoPipeliner: ap, rdb: rdb}
		}
	}
	return rdb
}

// Unwrap returns the client Wrap made c from, else c: what a command that
// a Cluster must send to every master (FUNCTION LOAD) needs, where the
// pipeliner would send it to one node.
func Unwrap(c redis.UniversalClient) redis.UniversalClient {
	if p, ok := c.(*Client); ok {
		return p.rdb
	}
	return c
}
