package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/thread"
	"github.com/stretchr/testify/require"
)

func TestDetachCancel(t *testing.T) {
	t.Parallel()

	t.Run("a cancel request detaches, with a deadline", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancelCause(context.WithValue(t.Context(), ctxKey{}, "kept"))
		cancel(errCancelRequested)
		require.True(t, stopRequested(ctx))

		dctx, dcancel := detachCancel(ctx)
		defer dcancel()
		require.NoError(t, dctx.Err(), "the writes that record the cancel can run")
		require.False(t, stopRequested(dctx), "finalize does not detach twice")
		deadline, ok := dctx.Deadline()
		require.True(t, ok, "bounded")
		require.WithinDuration(t, time.Now().Add(cancelFinalizeTimeout), deadline, time.Second)
		require.Equal(t, "kept", dctx.Value(ctxKey{}), "the logger and trace values stay")
	})

	for name, cause := range map[string]error{"lease lost": errLeaseLost, "shutdown": context.Canceled} {
		t.Run(name+" stays cancelled", func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancelCause(t.Context())
			cancel(cause)
			require.False(t, stopRequested(ctx))
			dctx, dcancel := detachCancel(ctx)
			defer dcancel()
			require.Error(t, dctx.Err(), "only a cancel request is finalized past the cancel")
		})
	}

	t.Run("a live context is returned as is", func(t *testing.T) {
		t.Parallel()
		dctx, dcancel := detachCancel(t.Context())
		defer dcancel()
		require.Equal(t, t.Context(), dctx)
	})
}

type ctxKey struct{}

func TestHandBackOnCancel(t *testing.T) {
	t.Parallel()
	loadErr := errors.New("load bundle: context canceled")

	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(errCancelRequested)
	err := handBackOnCancel(ctx, loadErr)
	require.ErrorIs(t, err, errCancelledLoading)
	require.ErrorIs(t, err, errDraining, "handed back like a drain: lease released, retried at once, not a failure")
	require.ErrorContains(t, err, loadErr.Error())
	require.NoError(t, handBackOnCancel(ctx, nil))

	lost, cancelLost := context.WithCancelCause(t.Context())
	cancelLost(errLeaseLost)
	require.Equal(t, loadErr, handBackOnCancel(lost, loadErr), "other causes fail the activation as before")
	require.Equal(t, loadErr, handBackOnCancel(t.Context(), loadErr))
}

// TestIsInfra classifies by type, not by text: a refusal whose message
// happens to mention a timeout is the model's to read.
func TestIsInfra(t *testing.T) {
	t.Parallel()
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("start child: %w", opErr), true},
		{fmt.Errorf("get: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("x: %w", redis.ErrClosed), true},
		// asynq's client words a refused connection as text: the queue marks it.
		{fmt.Errorf("start child: enqueue start for k: %w: %w", queue.ErrNotEnqueued, errors.New("UNKNOWN: redis eval error: dial tcp: connect: connection refused")), true},
		{errors.New("directive t/x: the service answered: i/o timeout"), false},
		{errors.New("connection refused is what the tool said"), false},
		{&thread.LimitError{Code: thread.CodeSpendExceeded}, false},
	} {
		require.Equal(t, tc.want, isInfra(tc.err), "%v", tc.err)
	}
}
