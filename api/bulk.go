package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/thread"
)

// bulkPrefix is the path of a bulk operation, before its id.
const bulkPrefix = "/v1/bulk/"

// BulkRequest is POST /v1/bulk's body: the action, the filters of GET
// /v1/threads, and the action's own fields.
type BulkRequest struct {
	Action    string            `json:"action"`
	Tags      map[string]string `json:"tags,omitempty"`
	Status    string            `json:"status,omitempty"`
	Directive string            `json:"directive,omitempty"`
	Kind      string            `json:"kind,omitempty"`
	Tenant    string            `json:"tenant,omitempty"`
	Since     string            `json:"since,omitempty"`
	Until     string            `json:"until,omitempty"`
	// Message is what resumed threads continue with.
	Message string `json:"message,omitempty"`
	// By and Reason: who decides and why (approve, deny).
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	DryRun bool   `json:"dry_run,omitempty"`
}

// startBulk answers POST /v1/bulk (orchestrator.StartBulk): a dry run
// 200 {matched}; else 202 {operation, matched}, the operation run in the
// background (a scheduler finishes it if this process dies). A bound
// token's operation acts on its tenant's runs only.
func (s *server) startBulk(w http.ResponseWriter, r *http.Request, _ string) {
	var b BulkRequest
	if !decode(w, r, &b, false) {
		return
	}
	if err := orchestrator.CheckBulkAction(b.Action); err != nil {
		badRequest(w, r, "%v", err)
		return
	}
	if b.Status != "" && !thread.Status(b.Status).Valid() {
		badRequest(w, r, "status %q: want one of created, running, waiting, paused, completed, error, cancelled, continued", b.Status)
		return
	}
	if b.Kind != "" && b.Kind != "graph" && b.Kind != "thread" {
		badRequest(w, r, "kind %q: want graph or thread", b.Kind)
		return
	}
	tenant, ok := s.filterTenant(w, r, b.Tenant)
	if !ok {
		return
	}
	var f orchestrator.Filter
	tags := make([]string, 0, len(b.Tags))
	for k, v := range b.Tags {
		tags = append(tags, k+"="+v)
	}
	if err := orchestrator.ListRange(&f, tags, b.Since, b.Until, ""); err != nil {
		badRequest(w, r, "%v", err)
		return
	}
	req := orchestrator.BulkRequest{Action: b.Action, Message: b.Message, By: who(r, b.By), Reason: b.Reason, DryRun: b.DryRun,
		Filter: orchestrator.BulkFilter{Tags: f.Tags, Status: thread.Status(b.Status), Directive: b.Directive, Kind: b.Kind,
			Tenant: tenant, Since: f.Since, Until: f.Until}}
	started, err := s.cfg.Orch.StartBulk(r.Context(), req)
	if err != nil {
		s.fail(w, r, "", err)
		return
	}
	if b.DryRun {
		writeJSON(w, http.StatusOK, map[string]int64{"matched": started.Matched})
		return
	}
	if started.Matched > 0 {
		go s.runBulk(started.Operation)
	}
	w.Header().Set("Location", bulkPrefix+started.Operation)
	writeJSON(w, http.StatusAccepted, started)
}

// runBulk runs operation id to its end in the background.
func (s *server) runBulk(id string) {
	host, _ := os.Hostname()
	op, err := s.cfg.Orch.RunBulk(context.Background(), id, fmt.Sprintf("api:%s:%d", host, os.Getpid()), nil)
	if err != nil {
		s.log.Error("bulk operation", "operation", id, "error", err)
		return
	}
	s.log.Info("bulk operation run", "operation", id, "status", op.Status, "done", op.Done, "failed", op.Failed)
}

// showBulk answers GET /v1/bulk/{id}: another tenant's operation, to a
// bound token, is one that does not exist.
func (s *server) showBulk(w http.ResponseWriter, r *http.Request, id string) {
	op, err := s.cfg.Orch.Bulk(r.Context(), id, boundTenant(r))
	if errors.Is(err, orchestrator.ErrBulkNotFound) {
		writeProblem(w, r, problem(http.StatusNotFound, "not_found", "bulk operation %q not found", id))
		return
	}
	s.reply(w, r, "", op, err)
}
