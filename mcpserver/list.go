package mcpserver

import (
	"context"
	"fmt"
	"sort"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// listLimit and maxListLimit are list_threads' page size by default and
// at most.
const (
	listLimit    = 50
	maxListLimit = 1000
)

// ListInput is list_threads' input: the filters of `spool thread list`.
type ListInput struct {
	Status     string            `json:"status,omitempty" jsonschema:"created, running, waiting, paused, completed, error, cancelled or continued"`
	Directive  string            `json:"directive,omitempty" jsonschema:"the runs of this directive (or graph) only"`
	Kind       string            `json:"kind,omitempty" jsonschema:"thread or graph: threads or graph runs only; default both"`
	Parent     string            `json:"parent,omitempty" jsonschema:"the children of this run only"`
	WaitingFor string            `json:"waiting_for,omitempty" jsonschema:"waiting runs that wait for this only (children, approval, message, sleep, capacity, ...)"`
	Tags       map[string]string `json:"tags,omitempty" jsonschema:"the runs carrying every one of these tags only"`
	Since      string            `json:"since,omitempty" jsonschema:"created at or after: an RFC 3339 time, a date, or a duration before now (90m, 24h, 7d)"`
	Until      string            `json:"until,omitempty" jsonschema:"created at or before, in the same forms"`
	Tenant     string            `json:"tenant,omitempty" jsonschema:"one tenant's runs only; a bound server lists its own tenant's only"`
	Limit      int               `json:"limit,omitempty" jsonschema:"the most runs to return, 1 to 1000 (default 50)"`
	Cursor     string            `json:"cursor,omitempty" jsonschema:"the next_cursor of the page before"`
}

// ListOutput is list_threads' answer: a page of runs, newest first.
type ListOutput struct {
	Threads    []*spooltype.Record `json:"threads"`
	NextCursor string              `json:"next_cursor,omitempty"`
}

// addListTool adds list_threads to s.
func addListTool(s *mcp.Server, h *handlers) {
	mcp.AddTool(s, &mcp.Tool{Name: "list_threads", Description: "List runs (threads and graph runs), newest first, by status, " +
		"directive, kind, parent, what they wait for, tags and creation time; a page at a time (next_cursor, when there is more, " +
		"goes in cursor for the next)."}, h.list)
}

func (h *handlers) list(ctx context.Context, _ *mcp.CallToolRequest, in ListInput) (*mcp.CallToolResult, any, error) {
	f, err := h.filter(in)
	if err != nil {
		return nil, nil, err
	}
	recs, next, err := h.cfg.Orch.ThreadsPage(ctx, f)
	if err != nil {
		return nil, nil, err
	}
	if recs == nil {
		recs = []*spooltype.Record{}
	}
	for _, rec := range recs {
		rec.Cost.Spend = h.cfg.Orch.RunSpend(ctx, rec) // a graph run's: its subtree's, as show_graph gives it
	}
	return nil, ListOutput{Threads: recs, NextCursor: next}, nil
}

// filter is the listing in asks for, within the tenant this server is
// bound to: another tenant is answered as one that does not exist.
func (h *handlers) filter(in ListInput) (orchestrator.Filter, error) {
	f := orchestrator.Filter{Status: thread.Status(in.Status), Directive: in.Directive, Parent: in.Parent, Limit: listLimit}
	if f.Status != "" && !f.Status.Valid() {
		return f, fmt.Errorf("status %q: want one of created, running, waiting, paused, completed, error, cancelled, continued", in.Status)
	}
	switch in.Kind {
	case "", spooltype.KindThread, spooltype.KindGraph:
		f.Kind = in.Kind
	default:
		return f, fmt.Errorf("kind %q: want thread or graph", in.Kind)
	}
	if in.WaitingFor != "" {
		if err := orchestrator.CheckWaitingFor(in.WaitingFor); err != nil {
			return f, err
		}
		f.WaitingFor = in.WaitingFor
	}
	if in.Limit != 0 {
		if in.Limit < 1 || in.Limit > maxListLimit {
			return f, fmt.Errorf("limit %d: want 1 to %d", in.Limit, maxListLimit)
		}
		f.Limit = in.Limit
	}
	f.Tenant = h.cfg.Tenant
	if in.Tenant != "" {
		if err := thread.CheckTenant(in.Tenant); err != nil {
			return f, err
		}
		if h.cfg.Tenant != "" && in.Tenant != h.cfg.Tenant {
			return f, tenantNotFound(in.Tenant) // another tenant's: as if it did not exist
		}
		f.Tenant = in.Tenant
	}
	tags := make([]string, 0, len(in.Tags))
	for k, v := range in.Tags {
		tags = append(tags, k+"="+v)
	}
	sort.Strings(tags)
	return f, orchestrator.ListRange(&f, tags, in.Since, in.Until, in.Cursor)
}
