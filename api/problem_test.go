package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/thread"
)

// TestCeilingRefusal: a start a tenant ceiling refused is 429 with its
// code, and Retry-After (whole seconds, rounded up) when the ceiling's
// reset is known, none when it is not.
func TestCeilingRefusal(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err   *thread.AdmissionError
		after string
	}{
		{&thread.AdmissionError{Code: admission.CodeTenantRateExceeded, Message: "rate", RetryAfter: 1500 * time.Millisecond}, "2"},
		{&thread.AdmissionError{Code: admission.CodeTenantBudgetExhausted, Message: "budget", RetryAfter: time.Hour}, "3600"},
		{&thread.AdmissionError{Code: admission.CodeTenantRunsExceeded, Message: "runs"}, ""},
	} {
		w := httptest.NewRecorder()
		writeProblem(w, nil, problemOf(fmt.Errorf("start: %w", c.err)))
		require.Equal(t, http.StatusTooManyRequests, w.Code, c.err.Code)
		require.Equal(t, c.after, w.Header().Get("Retry-After"), c.err.Code)
		var p Problem
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
		require.Equal(t, c.err.Code, p.Code)
		require.NotContains(t, w.Body.String(), "RetryAfter", "the header only, not a member of the body")
	}
}
