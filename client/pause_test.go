package client_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/api"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/client"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// holdDirective is t/hold, a thread no worker runs here: it stays
// created, so a pause is requested and taken at its first boundary.
const holdDirective = "# Hold\n\n```xml\n<directive name=\"hold\" version=\"1.0.0\">\n  <metadata>\n" +
	"    <description>Hold</description>\n    <model tier=\"fast\" />\n    <limits turns=\"3\" spend=\"0.1\" />\n" +
	"    <permissions><execute><tool>rye/file-system/*</tool></execute></permissions>\n  </metadata>\n</directive>\n```\n"

// oneGraph is g/one, a graph run no worker runs here.
const oneGraph = `version: "1.0.0"
description: returns at once
permissions:
  - rye.execute.tool.rye.file-system.*
config:
  start: done
  nodes:
    done:
      type: return
      output: {ok: true}
`

// pauseAPI is a `spool api` in process (api.New) over a real Redis, with
// no worker: three tokens, one bound to acme, one to beta, one unbound.
// reg is a registry of the same keys, to play a worker's part.
type pauseAPI struct {
	orch   *orchestrator.Orchestrator
	reg    *registry.Registry
	bundle string
	url    string
}

const (
	acmeToken = "acme-token-0123456789"
	betaToken = "beta-token-0123456789"
	opsToken  = "ops-token-0123456789"
)

func newPauseAPI(t *testing.T) *pauseAPI {
	t.Helper()
	r := testenv.NewRedis(t)
	store := blobstore.NewMemory()
	dir := t.TempDir()
	testenv.WriteFiles(t, dir, map[string]string{".ai/directives/t/hold.md": holdDirective, ".ai/graphs/g/one.yaml": oneGraph})
	bundle, err := directive.BuildBundle(t.Context(), store, dir, "", nil)
	require.NoError(t, err)
	signer, err := transcript.GenerateKey()
	require.NoError(t, err)
	aq := asynq.NewClientFromRedisClient(r.Client)
	t.Cleanup(func() { _ = aq.Close() })
	o, err := orchestrator.New(orchestrator.Config{Namespace: r.Namespace, Logger: slog.New(slog.DiscardHandler)}, r.Client, store,
		&queue.Enqueuer{Client: aq}, signer, transcript.NewKeyring(signer.PublicKey()))
	require.NoError(t, err)
	token := func(name, tok, tenant string) api.Token {
		return api.Token{Name: name, SHA256: sha256.Sum256([]byte(tok)), Tenant: tenant}
	}
	h, err := api.New(api.Config{Orch: o, Project: filepath.Clean(dir), Logger: slog.New(slog.DiscardHandler),
		Tokens: []api.Token{token("acme", acmeToken, "acme"), token("beta", betaToken, "beta"), token("ops", opsToken, "")}})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	reg, err := registry.New(registry.Config{Client: r.Client, Keys: keyspace.New(r.Namespace)})
	require.NoError(t, err)
	return &pauseAPI{orch: o, reg: reg, bundle: bundle, url: srv.URL}
}

func (p *pauseAPI) client(t *testing.T, token string) *client.Client {
	t.Helper()
	c, err := client.New(p.url, client.WithToken(token))
	require.NoError(t, err)
	return c
}

// start registers a run of tenant (a thread of t/hold, or with graph a
// run of g/one) under parent.
func (p *pauseAPI) start(t *testing.T, tenant, parent string, graph bool) *spooltype.Record {
	t.Helper()
	name := "t/hold"
	if graph {
		name = "g/one"
	}
	rec, err := p.orch.Start(t.Context(), orchestrator.StartRequest{Directive: name, Graph: graph, Inputs: map[string]any{},
		Bundle: p.bundle, Tenant: tenant, ParentID: parent})
	require.NoError(t, err)
	return rec
}

// problemOf is err's problem, required.
func problemOf(t *testing.T, err error) *spooltype.Problem {
	t.Helper()
	var p *spooltype.Problem
	require.True(t, errors.As(err, &p), "want a problem, got %v", err)
	return p
}

// TestPauseAndUnpause: the Go client's Pause and Unpause (and the graph
// routes') through the API to the orchestrator. A pause reaches the run
// and its descendants, or with tree the whole tree from its root, and
// each record says pause_requested; unpause takes it back. The graph
// routes take a run's id and refuse a thread's (not_graph); a run that
// has ended is 409 run_ended; an empty body is a pause of the run and its
// descendants; a token bound to another tenant gets 404 exactly as for an
// id that does not exist, and nothing is paused.
func TestPauseAndUnpause(t *testing.T) {
	t.Parallel()
	p := newPauseAPI(t)
	ctx := t.Context()
	acme, ops := p.client(t, acmeToken), p.client(t, opsToken)
	root := p.start(t, "acme", "", false)
	child := p.start(t, "acme", root.ThreadID, false)
	grandchild := p.start(t, "acme", child.ThreadID, false)
	run := p.start(t, "acme", "", true)
	betaRun := p.start(t, "beta", "", false)

	requested := func(id string) bool {
		t.Helper()
		rec, err := ops.Show(ctx, id)
		require.NoError(t, err)
		return rec.PauseRequested
	}

	// The child and its descendant; not its parent.
	res, err := acme.Pause(ctx, child.ThreadID, false)
	require.NoError(t, err)
	require.Equal(t, &spooltype.PauseResult{Success: true, ThreadID: child.ThreadID, Status: thread.StatusCreated, PauseRequested: true, Runs: 2}, res)
	require.True(t, requested(child.ThreadID))
	require.True(t, requested(grandchild.ThreadID))
	require.False(t, requested(root.ThreadID))

	// With tree: from the root.
	res, err = acme.Unpause(ctx, grandchild.ThreadID, true)
	require.NoError(t, err)
	require.True(t, res.Success)
	require.Equal(t, root.ThreadID, res.ThreadID, "tree: from the root")
	require.Equal(t, thread.StatusCreated, res.Status)
	require.False(t, res.PauseRequested)
	require.Equal(t, 3, res.Runs)
	for _, id := range []string{root.ThreadID, child.ThreadID, grandchild.ThreadID} {
		require.False(t, requested(id), id)
	}
	res, err = acme.Pause(ctx, grandchild.ThreadID, true)
	require.NoError(t, err)
	require.Equal(t, root.ThreadID, res.ThreadID)
	require.Equal(t, 3, res.Runs)
	require.True(t, requested(root.ThreadID))
	_, err = acme.Unpause(ctx, root.ThreadID, false)
	require.NoError(t, err)

	// An empty body, and a body with a field the route does not take.
	post := func(path, body string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+acmeToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, post("/v1/threads/"+url.PathEscape(child.ThreadID)+"/pause", ""))
	require.True(t, requested(grandchild.ThreadID), "an empty body pauses the run and its descendants")
	require.False(t, requested(root.ThreadID))
	require.Equal(t, http.StatusBadRequest, post("/v1/threads/"+url.PathEscape(child.ThreadID)+"/unpause", `{"cascade": true}`))
	require.Equal(t, http.StatusOK, post("/v1/threads/"+url.PathEscape(child.ThreadID)+"/unpause", `{}`))
	require.False(t, requested(grandchild.ThreadID))

	// The graph routes take a run's id, and refuse a thread's.
	res, err = acme.PauseGraph(ctx, run.ThreadID, false)
	require.NoError(t, err)
	require.Equal(t, &spooltype.PauseResult{Success: true, ThreadID: run.ThreadID, Status: thread.StatusCreated, PauseRequested: true, Runs: 1}, res)
	res, err = acme.UnpauseGraph(ctx, run.ThreadID, false)
	require.NoError(t, err)
	require.False(t, res.PauseRequested)
	require.False(t, requested(run.ThreadID))
	for _, f := range []func(context.Context, string, bool) (*spooltype.PauseResult, error){acme.PauseGraph, acme.UnpauseGraph} {
		_, err = f(ctx, root.ThreadID, false)
		pr := problemOf(t, err)
		require.Equal(t, http.StatusNotFound, pr.Status)
		require.Equal(t, "not_graph", pr.Code)
	}
	res, err = acme.Pause(ctx, run.ThreadID, false)
	require.NoError(t, err, "the thread routes take a run's id too")
	require.Equal(t, run.ThreadID, res.ThreadID)
	_, err = acme.Unpause(ctx, run.ThreadID, false)
	require.NoError(t, err)

	// Another tenant's run is an id that does not exist.
	missing := betaRun.ThreadID[:len(betaRun.ThreadID)-4] + "zzzz"
	for _, f := range []func(context.Context, string, bool) (*spooltype.PauseResult, error){acme.Pause, acme.Unpause} {
		_, got := f(ctx, betaRun.ThreadID, true)
		_, want := f(ctx, missing, true)
		wp, gp := problemOf(t, want), problemOf(t, got)
		require.Equal(t, http.StatusNotFound, wp.Status)
		require.Equal(t, "not_found", wp.Code)
		gp.Detail = strings.ReplaceAll(gp.Detail, betaRun.ThreadID, missing)
		gp.Instance = strings.ReplaceAll(gp.Instance, url.PathEscape(betaRun.ThreadID), url.PathEscape(missing))
		require.Equal(t, wp, gp)
	}
	require.False(t, requested(betaRun.ThreadID))
	res, err = p.client(t, betaToken).Pause(ctx, betaRun.ThreadID, false)
	require.NoError(t, err, "its own tenant's")
	require.True(t, res.PauseRequested)

	// A run that has ended: 409 run_ended.
	_, err = ops.Cancel(ctx, grandchild.ThreadID, true)
	require.NoError(t, err)
	_, err = acme.Pause(ctx, grandchild.ThreadID, false)
	pr := problemOf(t, err)
	require.Equal(t, http.StatusConflict, pr.Status)
	require.Equal(t, "run_ended", pr.Code)
	require.Contains(t, pr.Detail, grandchild.ThreadID)
	_, err = acme.Unpause(ctx, grandchild.ThreadID, false)
	require.Equal(t, "run_ended", problemOf(t, err).Code)
	res, err = acme.Pause(ctx, root.ThreadID, false)
	require.NoError(t, err)
	require.Equal(t, 2, res.Runs, "an ended descendant is not reached")
}
