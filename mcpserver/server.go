// Package mcpserver serves spool to MCP clients (`spool mcp`, stdio), so
// that a coding assistant or any MCP client can drive a fleet: run_thread
// (directive, inputs, model, wait), show_thread, wait_thread,
// cancel_thread, pause_thread, unpause_thread, approve_call, deny_call
// and read_transcript, each taking thread_id (a graph run's id too), and
// run_graph (graph, inputs, wait), show_graph and send_graph_message for
// graph runs, backed by the orchestrator as the CLI and the API are (root
// threads start from the project directory through package launch).
//
// Each tool answers a thread's record (or the operation's result) as
// structured content, with the same JSON as text; a failure (an unknown
// thread, a refused start, a wait that timed out) is a tool error whose
// text says why. Decisions are recorded as made by "mcp:<client name>"
// (the name the client gave when it connected) unless the call says who.
//
// A server bound to a tenant (Config.Tenant: `spool mcp --tenant T`) is
// what an API token bound to T is: its starts are T's (a tenant argument
// naming another is refused), another tenant's run or parent is answered
// exactly as one that does not exist, and show_tenant shows T only.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// Config configures the server.
type Config struct {
	// Orch runs the operations. Required.
	Orch *orchestrator.Orchestrator
	// Project is the project root root threads are bundled from.
	// Required.
	Project string
	// UserDir is the user space bundled beside the project; "" leaves
	// it out.
	UserDir string
	// Version names spool to clients. Default "dev".
	Version string
	// MaxTranscriptBytes is the most of a transcript read_transcript
	// returns when the call gives no max_bytes (the end is kept). Default
	// 64 KiB.
	MaxTranscriptBytes int
	// Logger. Default discards.
	Logger *slog.Logger
	// Unavailable, when set, is why spool's services cannot be reached
	// (Redis is down or not configured): the server still answers the
	// handshake and lists its tools, and every tool call is a tool error
	// that says this. Orch may then be nil.
	Unavailable error
	// Tenant, when set, binds every tool to that tenant (see the package
	// doc). Default: every tenant.
	Tenant string
	// ShowTenant answers show_tenant: a tenant's state (package
	// admission's), or an error for a tenant it does not know. Default:
	// the orchestrator's TenantStatus (what `spool tenant show` prints),
	// and for the bound tenant its BoundTenantStatus (it exists for its
	// caller, runs or not).
	ShowTenant func(ctx context.Context, tenant string) (any, error)
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.MaxTranscriptBytes <= 0 {
		c.MaxTranscriptBytes = 64 << 10
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ShowTenant == nil && c.Orch != nil {
		c.ShowTenant = func(ctx context.Context, name string) (any, error) {
			if name == c.Tenant {
				return c.Orch.BoundTenantStatus(ctx, name)
			}
			return c.Orch.TenantStatus(ctx, name)
		}
	}
	return c
}

func (c Config) validate() error {
	if c.Orch == nil && c.Unavailable == nil {
		return errors.New("mcpserver: Config.Orch is required")
	}
	if c.Project == "" {
		return errors.New("mcpserver: Config.Project is required")
	}
	if c.Tenant != "" {
		if err := thread.CheckTenant(c.Tenant); err != nil {
			return fmt.Errorf("mcpserver: Config.Tenant: %w", err)
		}
	}
	return nil
}

// ServeStdio serves the tools on stdin and stdout until the client
// disconnects or ctx ends.
func ServeStdio(ctx context.Context, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	err = s.Run(ctx, &mcp.StdioTransport{})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// handlers holds what the tools share.
type handlers struct{ cfg Config }

// New returns the MCP server with spool's tools.
func New(cfg Config) (*mcp.Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &handlers{cfg: cfg}
	s := mcp.NewServer(&mcp.Implementation{Name: "spool", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: "Spool runs LLM agent threads on a fleet of workers. run_thread starts one (wait=true waits for its end); " +
			"show_thread, wait_thread and read_transcript follow it; a thread waiting on a person (status waiting, waiting_for approval) " +
			"goes on after approve_call or deny_call; cancel_thread stops it and, by default, its children; pause_thread pauses it and its " +
			"descendants (status paused) until unpause_thread; list_threads finds runs by status, tags and time. " +
			"run_graph starts a graph run (a fixed order of tool steps and child threads) and show_graph shows its node table; " +
			"send_graph_message sends a run waiting at a wait_message node (waiting_for message) the message it waits for; " +
			"the thread tools take run ids too.",
	})
	mcp.AddTool(s, &mcp.Tool{Name: "run_thread", Description: "Start a thread running a directive of the project. " +
		"Returns its record (thread_id, status); with wait=true, the final record once the thread has ended."}, h.run)
	mcp.AddTool(s, &mcp.Tool{Name: "show_thread", Description: "A thread's record: status, result, outputs, error, cost, " +
		"children, and what it waits for."}, h.show)
	mcp.AddTool(s, &mcp.Tool{Name: "wait_thread", Description: "Wait until a thread (following its continuations) has ended " +
		"and return its final record; timeout in seconds (default: until it ends)."}, h.wait)
	mcp.AddTool(s, &mcp.Tool{Name: "cancel_thread", Description: "Cancel a thread (the one its continuation chain has reached); " +
		"its children too unless cascade is false."}, h.cancel)
	mcp.AddTool(s, &mcp.Tool{Name: "pause_thread", Description: "Pause a thread or graph run (the one its continuation chain has " +
		"reached) and its unfinished descendants; with tree=true, the whole tree it belongs to, from its root. A waiting run is paused " +
		"at once, a running one at its next boundary (before a turn, between graph steps): status paused, holding no worker slot, its " +
		"paused time not counted against its duration limit. Returns what the request did (runs reached, paused now)."}, h.pause)
	mcp.AddTool(s, &mcp.Tool{Name: "unpause_thread", Description: "Let a paused thread or graph run and its descendants (tree=true: " +
		"the whole tree it belongs to, from its root) go on where they were: one that waited waits again, and is woken at once when " +
		"what it waited for came meanwhile."}, h.unpause)
	mcp.AddTool(s, &mcp.Tool{Name: "approve_call", Description: "Approve a tool call that waits for a person's decision " +
		"(call_id; every pending call of the thread when omitted)."}, h.approve)
	mcp.AddTool(s, &mcp.Tool{Name: "deny_call", Description: "Deny a tool call that waits for a person's decision; the model " +
		"gets the reason as the call's error (call_id; every pending call when omitted)."}, h.deny)
	mcp.AddTool(s, &mcp.Tool{Name: "read_transcript", Description: "A thread's transcript as it is so far: format markdown " +
		"(default) or text, the last max_bytes of it."}, h.transcript)
	addGraphTools(s, h)
	addListTool(s, h)
	addBulkTools(s, h)
	mcp.AddTool(s, &mcp.Tool{Name: "show_tenant", Description: "A tenant's admission state: its share, running and waiting " +
		"activations, ceilings and spend (tenant; default the tenant this server is bound to, else default)."}, h.showTenant)
	if cfg.Unavailable != nil {
		s.AddReceivingMiddleware(failTools(cfg.Unavailable))
	}
	return s, nil
}

// RunInput is run_thread's input.
type RunInput struct {
	Directive string         `json:"directive" jsonschema:"the directive to run, e.g. demo/hello"`
	Inputs    map[string]any `json:"inputs,omitempty" jsonschema:"the directive's inputs"`
	Model     string         `json:"model,omitempty" jsonschema:"a model id or tier; default: the directive's"`
	Wait      bool           `json:"wait,omitempty" jsonschema:"wait until the thread has ended and return its final record"`
	Admission
}

// Admission is what run_thread and run_graph take of admission.
type Admission struct {
	Tenant         string            `json:"tenant,omitempty" jsonschema:"the tenant the run's tree runs for; default: this server's, else default"`
	Priority       int               `json:"priority,omitempty" jsonschema:"1 (highest) to 5; default: the tenant's"`
	IdempotencyKey string            `json:"idempotency_key,omitempty" jsonschema:"start the run once per key in its tenant: a call with a key already used returns its run (existing: true)"`
	Tags           map[string]string `json:"tags,omitempty" jsonschema:"labels of the run and every run of its tree (a map of key to value), for finding them later"`
	Notify         string            `json:"notify,omitempty" jsonschema:"an http(s) URL POSTed the run's events (completed, error, cancelled, waiting for approval)"`
}

// apply sets a's fields on req, a start from MCP.
func (a Admission) apply(req *orchestrator.StartRequest) {
	req.Tenant, req.Priority, req.IdempotencyKey, req.Surface = a.Tenant, a.Priority, a.IdempotencyKey, orchestrator.SurfaceMCP
	req.Tags, req.Notify = a.Tags, a.Notify
}

// ThreadInput names a thread.
type ThreadInput struct {
	ThreadID string `json:"thread_id" jsonschema:"the thread's id"`
}

// WaitInput is wait_thread's input.
type WaitInput struct {
	ThreadID string  `json:"thread_id" jsonschema:"the thread's id"`
	Timeout  float64 `json:"timeout,omitempty" jsonschema:"seconds to wait at most; 0 or absent: until it ends"`
}

// CancelInput is cancel_thread's input.
type CancelInput struct {
	ThreadID string `json:"thread_id" jsonschema:"the thread's id"`
	Cascade  *bool  `json:"cascade,omitempty" jsonschema:"cancel its children too (default true)"`
}

// PauseInput is pause_thread's and unpause_thread's input.
type PauseInput struct {
	ThreadID string `json:"thread_id" jsonschema:"the thread's or graph run's id"`
	Tree     bool   `json:"tree,omitempty" jsonschema:"act on the whole tree the run belongs to, from its root; default: the run and its descendants"`
}

// DecideInput is approve_call's and deny_call's input.
type DecideInput struct {
	ThreadID  string `json:"thread_id" jsonschema:"the thread's id"`
	CallID    string `json:"call_id,omitempty" jsonschema:"the pending call of this very thread (show_thread lists them); absent: every pending call"`
	RequestID string `json:"request_id,omitempty" jsonschema:"with call_id: decide it only while this request of it waits (its pending request_id)"`
	Reason    string `json:"reason,omitempty" jsonschema:"why; deny_call requires it: the model reads it"`
	By        string `json:"by,omitempty" jsonschema:"who decides; default mcp:<client name>"`
}

// TranscriptInput is read_transcript's input.
type TranscriptInput struct {
	ThreadID string `json:"thread_id" jsonschema:"the thread's id"`
	Format   string `json:"format,omitempty" jsonschema:"markdown (default) or text"`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"the most to return (the end is kept); default 65536"`
}

// record returns thread id's record; an unknown id is an error naming it.
func (h *handlers) record(ctx context.Context, id string) (*spooltype.Record, error) {
	if strings.TrimSpace(id) == "" {
		return nil, errors.New("thread_id is required")
	}
	rec, err := h.cfg.Orch.Record(ctx, id)
	if err == nil && h.cfg.Tenant != "" && rec.TenantOrDefault() != h.cfg.Tenant {
		err = orchestrator.ErrNotFound // another tenant's: as if it did not exist
	}
	if errors.Is(err, orchestrator.ErrNotFound) {
		return nil, fmt.Errorf("thread %q not found", id)
	}
	return rec, err
}

func (h *handlers) run(ctx context.Context, _ *mcp.CallToolRequest, in RunInput) (*mcp.CallToolResult, any, error) {
	name := strings.TrimSuffix(strings.TrimSpace(in.Directive), ".md")
	if name == "" {
		return nil, nil, errors.New("directive is required")
	}
	if _, err := directive.CleanName(name); err != nil {
		return nil, nil, err
	}
	if in.Inputs == nil {
		in.Inputs = map[string]any{}
	}
	req := orchestrator.StartRequest{Directive: name, Inputs: in.Inputs, Model: in.Model}
	in.apply(&req)
	started, err := launch.Start(ctx, h.cfg.Orch, launch.Request{Project: h.cfg.Project, UserDir: h.cfg.UserDir, Logger: h.cfg.Logger,
		Scope: h.cfg.Tenant, StartRequest: req})
	if err != nil {
		return nil, nil, err
	}
	rec := started.Record
	h.cfg.Logger.Info("mcp: thread started", "thread_id", rec.ThreadID, "directive", name)
	if started.MissingKey != "" {
		h.cfg.Logger.Warn("the thread's model needs a provider key this process does not have; workers hold the keys",
			"thread_id", rec.ThreadID, "model", started.Model, "key", started.MissingKey)
	}
	if !in.Wait {
		return nil, rec, nil
	}
	return h.waitFor(ctx, rec.ThreadID, 0)
}

func (h *handlers) show(ctx context.Context, _ *mcp.CallToolRequest, in ThreadInput) (*mcp.CallToolResult, any, error) {
	rec, err := h.record(ctx, in.ThreadID)
	if err != nil {
		return nil, nil, err
	}
	return nil, rec, nil
}

func (h *handlers) wait(ctx context.Context, _ *mcp.CallToolRequest, in WaitInput) (*mcp.CallToolResult, any, error) {
	if _, err := h.record(ctx, in.ThreadID); err != nil {
		return nil, nil, err
	}
	if in.Timeout < 0 {
		return nil, nil, errors.New("timeout must not be negative")
	}
	return h.waitFor(ctx, in.ThreadID, time.Duration(in.Timeout*float64(time.Second)))
}

// waitFor waits for id's chain to end; past timeout (0: none) it is an
// error that says the thread's status then.
func (h *handlers) waitFor(ctx context.Context, id string, timeout time.Duration) (*mcp.CallToolResult, any, error) {
	res, err := h.cfg.Orch.Wait(ctx, []string{id}, timeout)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		status := "unknown"
		if rec, err := h.cfg.Orch.Latest(ctx, id); err == nil {
			status = string(rec.Status)
		}
		return nil, nil, fmt.Errorf("thread %s has not ended after %s: it is %s", id, timeout, status)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("wait for thread %s: %w", id, err)
	}
	return nil, res[id], nil
}

func (h *handlers) cancel(ctx context.Context, _ *mcp.CallToolRequest, in CancelInput) (*mcp.CallToolResult, any, error) {
	if _, err := h.record(ctx, in.ThreadID); err != nil {
		return nil, nil, err
	}
	cascade := in.Cascade == nil || *in.Cascade
	res, err := h.cfg.Orch.CancelChain(ctx, in.ThreadID, cascade)
	if err != nil {
		return nil, nil, err
	}
	return nil, res, nil
}

func (h *handlers) pause(ctx context.Context, _ *mcp.CallToolRequest, in PauseInput) (*mcp.CallToolResult, any, error) {
	if _, err := h.record(ctx, in.ThreadID); err != nil {
		return nil, nil, err
	}
	res, err := h.cfg.Orch.Pause(ctx, in.ThreadID, in.Tree)
	if err != nil {
		return nil, nil, err
	}
	return nil, res, nil
}

func (h *handlers) unpause(ctx context.Context, _ *mcp.CallToolRequest, in PauseInput) (*mcp.CallToolResult, any, error) {
	if _, err := h.record(ctx, in.ThreadID); err != nil {
		return nil, nil, err
	}
	res, err := h.cfg.Orch.Unpause(ctx, in.ThreadID, in.Tree)
	if err != nil {
		return nil, nil, err
	}
	return nil, res, nil
}

func (h *handlers) approve(ctx context.Context, req *mcp.CallToolRequest, in DecideInput) (*mcp.CallToolResult, any, error) {
	return h.decide(ctx, req, in, orchestrator.DecisionApprove)
}

func (h *handlers) deny(ctx context.Context, req *mcp.CallToolRequest, in DecideInput) (*mcp.CallToolResult, any, error) {
	if strings.TrimSpace(in.Reason) == "" {
		return nil, nil, errors.New("reason is required: the model gets it as the call's error")
	}
	return h.decide(ctx, req, in, orchestrator.DecisionDeny)
}

func (h *handlers) decide(ctx context.Context, req *mcp.CallToolRequest, in DecideInput, decision string) (*mcp.CallToolResult, any, error) {
	if _, err := h.record(ctx, in.ThreadID); err != nil {
		return nil, nil, err
	}
	var calls []string
	if in.CallID != "" {
		calls = []string{in.CallID}
	}
	var res *orchestrator.DecideResult
	var err error
	switch {
	case in.RequestID != "" && in.CallID == "":
		return nil, nil, errors.New("request_id needs the call_id it is a request of")
	case in.RequestID != "":
		res, err = h.cfg.Orch.DecideRequest(ctx, in.ThreadID, in.CallID, in.RequestID, decision, who(req, in.By), in.Reason)
	default:
		res, err = h.cfg.Orch.Decide(ctx, in.ThreadID, calls, decision, who(req, in.By), in.Reason)
	}
	if err != nil {
		return nil, nil, err
	}
	return nil, res, nil
}

// who is the person a decision is recorded as: by, else the client.
func who(req *mcp.CallToolRequest, by string) string {
	if b := strings.TrimSpace(by); b != "" {
		return b
	}
	if req != nil && req.Session != nil {
		if p := req.Session.InitializeParams(); p != nil && p.ClientInfo != nil && p.ClientInfo.Name != "" {
			return "mcp:" + p.ClientInfo.Name
		}
	}
	return "mcp"
}

func (h *handlers) transcript(ctx context.Context, _ *mcp.CallToolRequest, in TranscriptInput) (*mcp.CallToolResult, any, error) {
	rec, err := h.record(ctx, in.ThreadID)
	if err != nil {
		return nil, nil, err
	}
	limit := in.MaxBytes
	if limit <= 0 {
		limit = h.cfg.MaxTranscriptBytes
	}
	tr, err := h.cfg.Orch.ReadTranscript(ctx, rec)
	if err != nil {
		return nil, nil, err
	}
	var text string
	switch in.Format {
	case "", "markdown":
		meta := transcript.KnowledgeMeta{ThreadID: rec.ThreadID, Directive: rec.Directive, Status: string(rec.Status), Model: rec.Model,
			Turns: rec.Cost.Turns, Spend: rec.Cost.Spend}
		text = string(transcript.RenderKnowledge(meta, tr.Events))
	case "text":
		text = transcript.RenderText(tr.Events)
	default:
		return nil, nil, fmt.Errorf("format %q: want markdown or text", in.Format)
	}
	if len(text) > limit {
		cut := len(text) - limit
		for cut < len(text) && text[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
			cut++
		}
		text = fmt.Sprintf("[spool: the first %d bytes are left out; max_bytes=%d]\n", cut, limit) + text[cut:]
	}
	for _, w := range tr.Warnings {
		text += "\n[spool: warning: " + w + "]"
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
}
