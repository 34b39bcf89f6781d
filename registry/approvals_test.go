package registry

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDecideRequestBindsToItsRequest: a decision made for one request of
// a call (a link's nonce) decides that request only. Another request of
// the same call id is refused as not pending; a decision names the
// request it decided; and a decision recorded for a request that is no
// longer asked (the call asked again with a new request) is dropped by
// the suspension, so it decides nothing.
func TestDecideRequestBindsToItsRequest(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	acts := NewActivations(f.r.Client, f.ks, f.clock.Now)
	register(t, f, "a", "")
	c, err := acts.Claim(f.ctx, "a", "start", 0, "tok", "a", time.Minute)
	require.NoError(t, err)
	first := []PendingApproval{{CallID: "call_1_1", RequestID: "req_one", Tool: "t/x"}, {CallID: "call_1_2", Tool: "t/x"}}
	_, open, err := acts.SuspendForApproval(f.ctx, "a", c.Version, first)
	require.NoError(t, err)
	require.EqualValues(t, 2, open)

	d := Decision{Decision: DecisionApprove, By: "link", At: f.clock.Now()}
	_, _, err = acts.DecideRequest(f.ctx, "a", "call_1_1", "req_other", d)
	require.ErrorIs(t, err, ErrNotPending, "another request of the same call id")
	_, _, err = acts.DecideRequest(f.ctx, "a", "call_1_2", "req_one", d)
	require.ErrorIs(t, err, ErrNotPending, "the request of another call")
	_, _, err = acts.DecideRequest(f.ctx, "a", "call_1_1", "", d)
	require.ErrorIs(t, err, ErrNotPending, "a link without a request id decides no call that has one")
	decided, wake, err := acts.DecideRequest(f.ctx, "a", "call_1_1", "req_one", d)
	require.NoError(t, err)
	require.Equal(t, []string{"call_1_1"}, decided)
	require.Nil(t, wake, "call_1_2 still waits")
	_, _, err = acts.DecideRequest(f.ctx, "a", "call_1_1", "req_one", d)
	require.ErrorIs(t, err, ErrNotPending, "a request is decided once")
	decided, wake, err = acts.DecideRequest(f.ctx, "a", "call_1_2", "", d)
	require.NoError(t, err, "a call asked without a request id, by a link without one")
	require.Equal(t, []string{"call_1_2"}, decided)
	require.NotNil(t, wake, "nothing left undecided")
	got, err := acts.Decisions(f.ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "req_one", got["call_1_1"].RequestID, "the decision names its request")
	require.Empty(t, got["call_1_2"].RequestID)

	// The call is asked again (a rerun turn) with a new request before
	// its decision was applied: the old decision does not count.
	c2, err := acts.Claim(f.ctx, "a", "wake", wake.Seq, "tok2", "a@wake", time.Minute)
	require.NoError(t, err)
	again := []PendingApproval{{CallID: "call_1_1", RequestID: "req_two", Tool: "t/x"}}
	_, open, err = acts.SuspendForApproval(f.ctx, "a", c2.Version, again)
	require.NoError(t, err)
	require.EqualValues(t, 1, open, "the decision of req_one does not decide req_two")
	_, _, err = acts.DecideRequest(f.ctx, "a", "call_1_1", "req_one", d)
	require.ErrorIs(t, err, ErrNotPending)
	decided, wake, err = acts.Decide(f.ctx, "a", []string{"call_1_1"}, d)
	require.NoError(t, err, "a decision by call id takes whatever request is pending")
	require.Equal(t, []string{"call_1_1"}, decided)
	require.NotNil(t, wake)
	got, err = acts.Decisions(f.ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "req_two", got["call_1_1"].RequestID)
}
