package worker

import (
	"context"
	"errors"
	"testing"
	"time"

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
