package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/spool-run/spool/spooltype"
)

// Graph runs (`spool graph`, POST /v1/graphs and /v1/graphs/ID/...). A
// run is a registry record, so Show, Tree, Budget, Events, Pause,
// Unpause, Approve and Deny take run ids too.

// graphPath is the path of run id's route action ("" for the run).
func graphPath(id, action string) string {
	p := "/v1/graphs/" + url.PathEscape(id)
	if action != "" {
		p += "/" + action
	}
	return p
}

// RunGraph starts a graph run (POST /v1/graphs) and returns its record.
func (c *Client) RunGraph(ctx context.Context, req spooltype.GraphRunRequest) (*spooltype.Record, error) {
	return call[spooltype.Record](ctx, c, http.MethodPost, "/v1/graphs", req, http.StatusCreated)
}

// ShowGraph returns run id's record, node table and steps.
func (c *Client) ShowGraph(ctx context.Context, id string) (*spooltype.GraphRun, error) {
	return call[spooltype.GraphRun](ctx, c, http.MethodGet, graphPath(id, ""), nil, http.StatusOK)
}

// GraphState returns run id's state after step (step < 0: the last
// checkpoint's).
func (c *Client) GraphState(ctx context.Context, id string, step int) (*spooltype.GraphState, error) {
	q := url.Values{}
	if step >= 0 {
		q.Set("step", strconv.Itoa(step))
	}
	var out spooltype.GraphState
	if err := c.do(ctx, http.MethodGet, graphPath(id, "state"), q, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelGraph cancels the run id's chain has reached; cascade cancels its
// running children too.
func (c *Client) CancelGraph(ctx context.Context, id string, cascade bool) (*spooltype.CancelResult, error) {
	return call[spooltype.CancelResult](ctx, c, http.MethodPost, graphPath(id, "cancel"), spooltype.CancelRequest{Cascade: &cascade}, http.StatusOK)
}

// PauseGraph pauses the run id's chain has reached and its unfinished
// descendants (tree: the whole tree it belongs to, from its root), as
// Pause does; a thread's id is an *spooltype.Problem 404 (not_graph).
func (c *Client) PauseGraph(ctx context.Context, id string, tree bool) (*spooltype.PauseResult, error) {
	return call[spooltype.PauseResult](ctx, c, http.MethodPost, graphPath(id, "pause"), spooltype.PauseRequest{Tree: tree}, http.StatusOK)
}

// UnpauseGraph lets the run id's chain has reached and its unfinished
// descendants go on, as Unpause does.
func (c *Client) UnpauseGraph(ctx context.Context, id string, tree bool) (*spooltype.PauseResult, error) {
	return call[spooltype.PauseResult](ctx, c, http.MethodPost, graphPath(id, "unpause"), spooltype.PauseRequest{Tree: tree}, http.StatusOK)
}

// SendGraphMessage sends graph run id a message, which a wait_message
// node of its name takes: durable once it returns. A name the graph does
// not wait for or data its schema refuses is an *spooltype.Problem 422
// (message_unknown, message_invalid), a run that has ended 409
// (run_ended); a repeated req.ID is answered Duplicate.
func (c *Client) SendGraphMessage(ctx context.Context, id string, req spooltype.GraphMessageRequest) (*spooltype.MessageSent, error) {
	return call[spooltype.MessageSent](ctx, c, http.MethodPost, graphPath(id, "messages"), req, http.StatusOK)
}

// ResumeGraph starts a continuation run of a run that ended in error or
// was cancelled, from its last checkpoint (req.From, req.Set: the
// user's edits).
func (c *Client) ResumeGraph(ctx context.Context, id string, req spooltype.GraphResumeRequest) (*spooltype.ResumeResult, error) {
	return call[spooltype.ResumeResult](ctx, c, http.MethodPost, graphPath(id, "resume"), req, http.StatusCreated)
}

// ForkGraph starts a new run from run id's checkpoint after step
// req.AtStep and returns its record.
func (c *Client) ForkGraph(ctx context.Context, id string, req spooltype.GraphForkRequest) (*spooltype.Record, error) {
	return call[spooltype.Record](ctx, c, http.MethodPost, graphPath(id, "fork"), req, http.StatusCreated)
}
