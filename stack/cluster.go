package stack

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterReloadInterval is how stale a Cluster client's map of slots to
// masters may grow while nothing fails (go-redis's default is a minute).
// A reload is one CLUSTER SLOTS to one node.
const clusterReloadInterval = 5 * time.Second

// newClusterClient is a Cluster client that finds a failover in seconds.
// go-redis reloads the map of slots to masters on a MOVED or ASK reply
// and once a minute, but not when a master stops answering: after a
// master dies and its replica is promoted, the surviving nodes answer
// for the dead master's slots with nothing (no MOVED comes), so a client
// would dial the dead address for up to a minute. Here every node's
// client asks for a reload when a dial fails, a connection breaks, or a
// node says the cluster is down (go-redis runs one reload at a time,
// at most every 200ms), and the map is reloaded every
// clusterReloadInterval regardless.
func newClusterClient(opt *redis.ClusterOptions) *redis.ClusterClient {
	opt.ClusterStateReloadInterval = clusterReloadInterval
	c := redis.NewClusterClient(opt)
	c.OnNewNode(func(node *redis.Client) { node.AddHook(reloadOnFailure{c}) })
	return c
}

// reloadOnFailure asks a Cluster client to reload its slots when one of
// its nodes fails.
type reloadOnFailure struct{ c *redis.ClusterClient }

func (h reloadOnFailure) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil && ctx.Err() == nil {
			h.c.ReloadState(ctx)
		}
		return conn, err
	}
}

func (h reloadOnFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnFailure) check(ctx context.Context, err error) {
	if err != nil && ctx.Err() == nil && nodeFailed(err) {
		h.c.ReloadState(ctx)
	}
}

// nodeFailed reports whether err says the node is gone or no longer
// serves its slots (rather than refusing one command).
func nodeFailed(err error) bool {
	var ne net.Error
	switch {
	case errors.Is(err, redis.Nil):
		return false
	case errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed):
		return true
	}
	msg := err.Error()
	for _, p := range []string{"CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "LOADING"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
