package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	t.Parallel()
	already := &Error{Class: ClassRateLimited, RetryAfter: time.Second}
	cases := []struct {
		name  string
		err   error
		class string
		quota bool
	}{
		{"cancelled", fmt.Errorf("call: %w", context.Canceled), ClassCancelled, false},
		{"deadline", context.DeadlineExceeded, ClassTransient, false},
		{"net timeout", &net.OpError{Op: "read", Err: timeoutErr{}}, ClassTransient, false},
		{"conn reset", fmt.Errorf("post: %w", syscall.ECONNRESET), ClassTransient, false},
		{"conn refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, ClassTransient, false},
		{"unexpected eof", io.ErrUnexpectedEOF, ClassTransient, false},
		{"malformed body", fmt.Errorf("error parsing response json: %w", json.Unmarshal([]byte("{malformed json: <<<chaos>>>"), &struct{}{})), ClassTransient, false},
		{"malformed event", json.Unmarshal([]byte(`{"choices": 3}`), &struct{ Choices []int }{}), ClassTransient, false},
		{"request not encodable", func() error { _, err := json.Marshal(json.RawMessage("{")); return err }(), ClassPermanent, false},
		{"rate limit text", errors.New("Rate limit exceeded, slow down"), ClassRateLimited, false},
		{"overloaded text", errors.New("upstream overloaded"), ClassTransient, false},
		{"quota text", errors.New("You exceeded your current quota"), ClassPermanent, true},
		{"unknown", errors.New("schema invalid"), ClassPermanent, false},
	}
	for _, tc := range cases {
		got := Classify(tc.err)
		require.Equal(t, tc.class, got.Class, tc.name)
		require.Equal(t, tc.quota, got.Quota, tc.name)
		require.ErrorIs(t, got, tc.err, tc.name)
	}
	require.Nil(t, Classify(nil))
	require.Same(t, already, Classify(fmt.Errorf("wrapped: %w", already)))
}

func TestClassifyAPIStatus(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		typ    string
		class  string
		quota  bool
	}{
		{400, "invalid_request_error", ClassPermanent, false},
		{401, "authentication_error", ClassPermanent, false},
		{401, "api_error", ClassPermanent, false},
		{403, "overloaded_error", ClassPermanent, false},
		{403, "rate_limit_error", ClassPermanent, false},
		{402, "", ClassPermanent, true},
		{403, "permission_error", ClassPermanent, false},
		{404, "not_found_error", ClassPermanent, false},
		{408, "", ClassTransient, false},
		{413, "request_too_large", ClassPermanent, false},
		{422, "", ClassPermanent, false},
		{429, "rate_limit_error", ClassRateLimited, false},
		{429, "insufficient_quota", ClassPermanent, true},
		{400, "billing_error", ClassPermanent, true},
		{500, "api_error", ClassTransient, false},
		{502, "", ClassTransient, false},
		{503, "", ClassTransient, false},
		{504, "", ClassTransient, false},
		{529, "overloaded_error", ClassRateLimited, false},
		{529, "", ClassRateLimited, false},
		{0, "overloaded_error", ClassRateLimited, false},
	}
	for _, tc := range cases {
		e := classifyAPI(errors.New("x"), tc.status, tc.typ, "", "m", nil)
		require.Equal(t, tc.class, e.Class, "%d %s", tc.status, tc.typ)
		require.Equal(t, tc.quota, e.Quota, "%d %s", tc.status, tc.typ)
		require.Equal(t, tc.class == ClassRateLimited || tc.class == ClassTransient, e.Retryable())
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	cases := []struct {
		h    http.Header
		want time.Duration
	}{
		{nil, 0},
		{h(), 0},
		{h("retry-after", "12"), 12 * time.Second},
		{h("retry-after", "0.5"), 500 * time.Millisecond},
		{h("retry-after-ms", "1250.5", "retry-after", "2"), 1250500 * time.Microsecond},
		{h("retry-after", now.Add(30*time.Second).Format(http.TimeFormat)), 30 * time.Second},
		{h("retry-after", "soon"), 0},
		{h("retry-after", "-3"), 0},
		// No retry-after: the latest reset among the exhausted limits.
		{h("x-ratelimit-remaining-requests", "12", "x-ratelimit-reset-requests", "1s",
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "6m0s"), 6 * time.Minute},
		{h("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "17ms",
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1.5s"), 1500 * time.Millisecond},
		{h("x-ratelimit-remaining-tokens", "10", "x-ratelimit-reset-tokens", "6m0s"), 0},
		{h("anthropic-ratelimit-input-tokens-remaining", "0",
			"anthropic-ratelimit-input-tokens-reset", now.Add(40*time.Second).Format(time.RFC3339)), 40 * time.Second},
		{h("retry-after", "2", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "6m0s"), 2 * time.Second},
		{h("x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "later"), 0},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, retryAfter(tc.h, now), "%v", tc.h)
	}
}

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	e := &Error{Class: ClassRateLimited, StatusCode: 429, RetryAfter: 2 * time.Second, Message: "slow down"}
	require.Equal(t, "provider rate_limited: HTTP 429: slow down (retry after 2s)", e.Error())
	require.Equal(t, "HTTP 429: slow down (retry after 2s)", e.Detail())
	q := &Error{Class: ClassPermanent, Quota: true, StatusCode: 429, Message: "quota"}
	require.Equal(t, "provider permanent: quota: HTTP 429: quota", q.Error())
	n := &Error{Class: ClassTransient, Err: errors.New("connection reset")}
	require.Equal(t, "provider transient: connection reset", n.Error())
}
