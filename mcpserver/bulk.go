package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/thread"
)

// BulkInput is bulk_action's input: the action, list_threads' filters,
// and the action's own fields.
type BulkInput struct {
	Action    string            `json:"action" jsonschema:"cancel, resume, approve or deny"`
	Status    string            `json:"status,omitempty" jsonschema:"only runs in this status"`
	Directive string            `json:"directive,omitempty" jsonschema:"only runs of this directive (or graph)"`
	Kind      string            `json:"kind,omitempty" jsonschema:"thread or graph: threads or graph runs only"`
	Tags      map[string]string `json:"tags,omitempty" jsonschema:"only runs carrying every one of these tags"`
	Since     string            `json:"since,omitempty" jsonschema:"created at or after: an RFC 3339 time, a date, or a duration before now (24h, 7d)"`
	Until     string            `json:"until,omitempty" jsonschema:"created at or before, in the same forms"`
	Tenant    string            `json:"tenant,omitempty" jsonschema:"one tenant's runs only; a bound server acts on its own tenant's only"`
	Message   string            `json:"message,omitempty" jsonschema:"resume: what resumed threads continue with"`
	By        string            `json:"by,omitempty" jsonschema:"approve, deny: who decides (default mcp)"`
	Reason    string            `json:"reason,omitempty" jsonschema:"approve, deny: why"`
	DryRun    bool              `json:"dry_run,omitempty" jsonschema:"count the runs it would act on and change nothing"`
}

// BulkOutput is bulk_action's answer: how many runs it matched, and the
// operation acting on them (none for a dry run).
type BulkOutput struct {
	Operation string `json:"operation,omitempty"`
	Matched   int64  `json:"matched"`
}

// BulkShowInput names a bulk operation.
type BulkShowInput struct {
	Operation string `json:"operation" jsonschema:"the operation's id (bulk_action's answer)"`
}

// addBulkTools adds bulk_action and show_bulk to s.
func addBulkTools(s *mcp.Server, h *handlers) {
	mcp.AddTool(s, &mcp.Tool{Name: "bulk_action", Description: "Cancel, resume, approve or deny every run a filter selects, " +
		"as a durable operation acted on once per run (a scheduler finishes it if this server stops); dry_run counts first. " +
		"Follow it with show_bulk."}, h.bulk)
	mcp.AddTool(s, &mcp.Tool{Name: "show_bulk", Description: "A bulk operation's progress: status (running, completed), " +
		"matched, done, failed and each failure."}, h.showBulk)
}

func (h *handlers) bulk(ctx context.Context, _ *mcp.CallToolRequest, in BulkInput) (*mcp.CallToolResult, any, error) {
	if err := orchestrator.CheckBulkAction(in.Action); err != nil {
		return nil, nil, err
	}
	f, err := h.filter(ListInput{Status: in.Status, Directive: in.Directive, Kind: in.Kind, Tags: in.Tags, Since: in.Since,
		Until: in.Until, Tenant: in.Tenant})
	if err != nil {
		return nil, nil, err
	}
	by := in.By
	if by == "" {
		by = "mcp"
	}
	started, err := h.cfg.Orch.StartBulk(ctx, orchestrator.BulkRequest{Action: in.Action, Message: in.Message, By: by,
		Reason: in.Reason, DryRun: in.DryRun, Filter: orchestrator.BulkFilter{Tags: f.Tags, Status: f.Status,
			Directive: f.Directive, Kind: f.Kind, Tenant: f.Tenant, Since: f.Since, Until: f.Until}})
	if err != nil {
		return nil, nil, err
	}
	if in.DryRun {
		return nil, BulkOutput{Matched: started.Matched}, nil
	}
	if started.Matched > 0 {
		go h.runBulk(started.Operation)
	}
	return nil, BulkOutput{Operation: started.Operation, Matched: started.Matched}, nil
}

// runBulk runs operation id to its end beside the session.
func (h *handlers) runBulk(id string) {
	host, _ := os.Hostname()
	op, err := h.cfg.Orch.RunBulk(context.Background(), id, fmt.Sprintf("mcp:%s:%d", host, os.Getpid()), nil)
	if err != nil {
		h.cfg.Logger.Error("bulk operation", "operation", id, "error", err)
		return
	}
	h.cfg.Logger.Info("bulk operation run", "operation", id, "status", op.Status, "done", op.Done, "failed", op.Failed)
}

func (h *handlers) showBulk(ctx context.Context, _ *mcp.CallToolRequest, in BulkShowInput) (*mcp.CallToolResult, any, error) {
	if err := orchestrator.CheckBulkID(in.Operation); err != nil {
		return nil, nil, err
	}
	op, err := h.cfg.Orch.Bulk(ctx, in.Operation, h.cfg.Tenant)
	if errors.Is(err, orchestrator.ErrBulkNotFound) {
		return nil, nil, thread.Refuse("not_found", "bulk operation %q not found", in.Operation)
	}
	if err != nil {
		return nil, nil, err
	}
	return nil, op, nil
}
