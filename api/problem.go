package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// ProblemType is the media type of an error response (RFC 9457).
const ProblemType = spooltype.ProblemType

// Problem is an RFC 9457 problem detail, with spool's "code" member (the
// package doc lists the codes): the body of every error response, and
// the error the client returns for one (spooltype.Problem).
type Problem = spooltype.Problem

// problem makes a Problem of status with code and a detail.
func problem(status int, code, format string, args ...any) *Problem {
	return &Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Code: code, Detail: fmt.Sprintf(format, args...)}
}

// writeProblem writes p as the response.
func writeProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	if r != nil && p.Instance == "" {
		p.Instance = r.URL.EscapedPath()
	}
	w.Header().Set("Content-Type", ProblemType)
	w.Header().Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// refusals are the sentinel errors of what the caller got wrong, with
// the status and code of their problem, whose detail is the error and
// then hint.
var refusals = []struct {
	err    error
	status int
	code   string
	hint   string
}{
	{orchestrator.ErrNotFound, http.StatusNotFound, "not_found", ""},
	{launch.ErrRefused, http.StatusUnprocessableEntity, "refused", ""},
	{directive.ErrNotFound, http.StatusUnprocessableEntity, "directive_not_found", ""},
	{orchestrator.ErrParentNotFound, http.StatusUnprocessableEntity, "parent_not_found", ""},
	{orchestrator.ErrNotPending, http.StatusConflict, "not_pending", ""},
	{orchestrator.ErrRunEnded, http.StatusConflict, "run_ended", ""},
	{orchestrator.ErrFinished, http.StatusConflict, "finished", " (send and interrupt need a running or waiting thread; resume continues a finished one)"},
	{transcript.ErrTampered, http.StatusConflict, "transcript_damaged", ""},
	{orchestrator.ErrNoBudget, http.StatusNotFound, "no_budget", ""},
	{orchestrator.ErrGraphNotFound, http.StatusUnprocessableEntity, "graph_not_found", ""},
	{orchestrator.ErrGraphInvalid, http.StatusUnprocessableEntity, "graph_invalid", ""},
	{orchestrator.ErrNotGraph, http.StatusNotFound, "not_graph", ""},
	{orchestrator.ErrNoGraphState, http.StatusNotFound, "step_not_recorded", ""},
}

// problemOf maps an operation's error to a problem: what the caller got
// wrong is 4xx with its code, anything else is 500.
func problemOf(err error) *Problem {
	var p *Problem
	var le *thread.LimitError
	var nr *orchestrator.NotResumableError
	var ae *thread.AdmissionError
	var me *orchestrator.MessageError
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &me):
		return problem(http.StatusUnprocessableEntity, me.Code, "%s", me.Message)
	case errors.As(err, &ae):
		p := problem(ae.Status(), ae.Code, "%s", ae.Message)
		p.RetryAfter = int(math.Ceil(ae.RetryAfter.Seconds()))
		return p
	case errors.As(err, &le):
		return problem(http.StatusUnprocessableEntity, le.Code, "%v", err)
	case errors.As(err, &nr):
		return problem(http.StatusConflict, "not_resumable", "%v", err)
	}
	for _, f := range refusals {
		if errors.Is(err, f.err) {
			return problem(f.status, f.code, "%v%s", err, f.hint)
		}
	}
	return problem(http.StatusInternalServerError, "internal", "%v", err)
}
