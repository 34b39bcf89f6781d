package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestNodeFailed: what makes a Cluster client reload its slots, and what
// does not (a command's own refusal, a missing key, the caller giving up).
func TestNodeFailed(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{}}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{syscall.ECONNREFUSED, true},
		{fmt.Errorf("dial tcp 127.0.0.1:1: %w", syscall.ECONNREFUSED), true},
		{refused, true},
		{io.EOF, true},
		{syscall.ECONNRESET, true},
		{errors.New("CLUSTERDOWN The cluster is down"), true},
		{errors.New("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{redis.Nil, false},
		{errors.New("NOSCRIPT No matching script"), false},
		{errors.New("CONFLICT 3"), false},
		{context.Canceled, false},
	} {
		require.Equal(t, c.want, nodeFailed(c.err), "%v", c.err)
	}
}
