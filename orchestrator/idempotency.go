package orchestrator

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/telemetry"
	"github.com/spool-run/spool/thread"
)

// Idempotent starts. A start with an idempotency key (StartRequest.IdempotencyKey:
// `thread run --idempotency-key`, the API's Idempotency-Key header, MCP's
// idempotency_key, a schedule's tick) starts its run once per (tenant,
// key) within the retention, whoever asks and however often:
//
//  1. the request is planned as any start (every refusal of bad input is
//     said here, and nothing is recorded), its fingerprint computed
//     (requestFingerprint) and a run id planned;
//  2. idem_claim.lua, in the tenant's slot, records {fingerprint, run id}
//     for the key, or returns the run id recorded for it, or refuses a
//     key recorded for another request (idempotency_key_reused);
//  3. the run is started under that id, and registration is create-once:
//     whoever registers first starts it, every other start of the key
//     gets that run as it is now (Existing). A start handed an id nobody
//     registered yet (the first start is still on its way, or died after
//     its claim) starts it itself with the same request, so a crash
//     between the claim and the registration loses nothing.
//
// The key's record lives in the tenant's slot and the run in its tree's,
// which on a Redis Cluster no one script can touch together: the planned
// id and the create-once registration are what tie them.

// DefaultIdempotencyRetention is how long a key names its run when the
// admission policy says nothing (idempotency.retention).
const DefaultIdempotencyRetention = 24 * time.Hour

// idemStart is an idempotent start on its way through Start: its key,
// and whether the run was found registered by another start.
type idemStart struct {
	key     string
	adopted bool
}

// idemClaimScript claims a key (idem_claim.lua).
var idemClaimScript = redisfn.New("idem_claim", "", idemClaimLua)

//go:embed idem_claim.lua
var idemClaimLua string

// startIdempotent is Start of a request with an idempotency key (see
// above). The record it returns says Existing: false when this start
// registered the run, true when the key's run was there.
func (o *Orchestrator) startIdempotent(ctx context.Context, req StartRequest) (*registry.Record, error) {
	if err := thread.CheckIdempotencyKey(req.IdempotencyKey); err != nil {
		return nil, err
	}
	if req.Planned || req.Fork != nil || req.PreviousThreadID != "" {
		return nil, fmt.Errorf("start %s: an idempotency key starts a new run, not a planned child, a fork or a continuation", req.Directive)
	}
	plan := req
	sc, err := o.startContext(ctx, &plan)
	if err != nil {
		return nil, err
	}
	tenant, priority, err := o.runTenant(ctx, plan, sc)
	if err != nil {
		return nil, err
	}
	nt, err := o.plan(plan, sc)
	if err != nil {
		return nil, err
	}
	fp, err := requestFingerprint(plan, nt, priority)
	if err != nil {
		return nil, err
	}
	// A caller may fix the run's id itself (a schedule's tick id); the
	// key names it unless an earlier start of the key claimed another.
	planned := req.ID
	if planned == "" {
		planned = o.newID(IDRequest{Directive: nt.Directive, ParentID: req.ParentID})
	}
	id, first, err := o.claimKey(ctx, tenant, req.IdempotencyKey, fp, planned)
	if err != nil {
		return nil, err
	}
	st := &idemStart{key: req.IdempotencyKey}
	// An id another start claimed may be registered already: Start adopts
	// it then (Planned), and starts it otherwise.
	req.ID, req.Planned, req.idem = id, !first, st
	rec, err := o.Start(ctx, req)
	if err != nil {
		return nil, err
	}
	out := *rec
	out.Existing = &st.adopted
	trace.SpanFromContext(ctx).SetAttributes(telemetry.IdempotencyReplayed.Bool(st.adopted))
	if st.adopted {
		o.countReplay(ctx, tenant, req.Surface)
		o.threadLog(id).Info("idempotent start replayed", "tenant", tenant, "surface", req.Surface)
	}
	return &out, nil
}

// plan plans req's run, a graph run's or a thread's.
func (o *Orchestrator) plan(req StartRequest, sc startContext) (registry.NewThread, error) {
	if req.Graph {
		return o.planGraph(req, sc)
	}
	return o.planThread(req, sc)
}

// IdempotencyRetention is how long a key names its run:
// Config.IdempotencyRetention's (the admission policy's), else
// DefaultIdempotencyRetention.
func (o *Orchestrator) IdempotencyRetention(ctx context.Context) (time.Duration, error) {
	if o.cfg.IdempotencyRetention == nil {
		return DefaultIdempotencyRetention, nil
	}
	d, err := o.cfg.IdempotencyRetention(ctx)
	if err != nil {
		return 0, fmt.Errorf("idempotency retention: %w", err)
	}
	if d <= 0 {
		return DefaultIdempotencyRetention, nil
	}
	return d, nil
}

// claimKey runs idem_claim.lua for key of tenant: the run id the key
// names (planned, when this claim recorded it: first), or
// idempotency_key_reused when the key names another request's run.
func (o *Orchestrator) claimKey(ctx context.Context, tenant, key, fp, planned string) (id string, first bool, err error) {
	retention, err := o.IdempotencyRetention(ctx)
	if err != nil {
		return "", false, err
	}
	k := o.keys.Idempotency(tenant, KeyHash(key))
	res, err := idemClaimScript.Run(ctx, o.fast, []string{k}, fp, planned, o.Now().UnixMilli(), retention.Milliseconds()).Slice()
	if rf, ok := reply.Refused(err); ok && rf.Code == "IDEMREUSED" {
		run := strings.Join(rf.Fields, " ")
		e := thread.Refuse(thread.CodeIdempotencyKeyReused,
			"idempotency key %q started run %s with another request (directive or graph, inputs, model, limits, parent, queue or priority): "+
				"a key names one request", key, run)
		e.Run = run
		return "", false, e
	}
	if err != nil {
		return "", false, fmt.Errorf("claim idempotency key: %w", err)
	}
	if len(res) != 2 {
		return "", false, reply.Unexpected("idem_claim", res)
	}
	return reply.String(res[0]), reply.Int(res[1]) == 1, nil
}

// KeyHash is the hex SHA-256 of an idempotency key, which names its
// record (keyspace.Space.Idempotency).
func KeyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// requestFingerprint is the hex SHA-256 of the canonical JSON of what
// makes a start the request it is: kind, directive or graph, inputs
// (validated, defaults applied, coerced: nt's), model, limit overrides,
// parent, queue and priority. The bundle is not in it, nor how the caller
// waits: a retry after an edit of the project is the same request.
func requestFingerprint(req StartRequest, nt registry.NewThread, priority int) (string, error) {
	kind := registry.KindThread
	if req.Graph {
		kind = registry.KindGraph
	}
	inputs, err := canonicalJSON(nt.Inputs)
	if err != nil {
		return "", fmt.Errorf("fingerprint inputs: %w", err)
	}
	b, err := json.Marshal(struct {
		Kind     string          `json:"kind"`
		Name     string          `json:"name"`
		Inputs   json.RawMessage `json:"inputs"`
		Model    string          `json:"model"`
		Limits   thread.Limits   `json:"limits"`
		MaxSteps int             `json:"max_steps"`
		Parent   string          `json:"parent"`
		Queue    string          `json:"queue"`
		Priority int             `json:"priority"`
	}{kind, nt.Directive, inputs, req.Model, req.LimitOverrides, req.MaxSteps, req.ParentID, req.Queue, priority})
	if err != nil {
		return "", fmt.Errorf("fingerprint: %w", err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:]), nil
}

// canonicalJSON is v as JSON in one spelling: objects' keys sorted (as
// encoding/json writes maps), and every number written as its value (1,
// 1.0 and 1e0 are 1; an integer beyond float64's precision keeps its
// digits).
func canonicalJSON(v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var val any
	if err := dec.Decode(&val); err != nil {
		return nil, err
	}
	return json.Marshal(canonicalNumbers(val))
}

// canonicalNumbers rewrites v's json.Numbers (canonicalJSON).
func canonicalNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = canonicalNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = canonicalNumbers(e)
		}
	case json.Number:
		if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return json.Number(strconv.FormatInt(n, 10))
		}
		if f, err := strconv.ParseFloat(string(x), 64); err == nil {
			return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
		}
	}
	return v
}

// countReplay counts a start that found its key's run, by tenant and
// surface (spool_idempotent_replays_total): a counter of the namespace
// the monitor reads. Best effort: a metric lost is no start lost.
func (o *Orchestrator) countReplay(ctx context.Context, tenant, surface string) {
	if surface == "" {
		surface = SurfaceOther
	}
	if err := o.rdb.HIncrBy(context.WithoutCancel(ctx), o.keys.IdempotentReplays(), tenant+" "+surface, 1).Err(); err != nil {
		o.log.Warn("idempotent replay not counted", "tenant", tenant, "error", err)
	}
}

// The surfaces a start comes from (StartRequest.Surface), as the replay
// metric names them.
const (
	SurfaceCLI      = "cli"
	SurfaceAPI      = "api"
	SurfaceMCP      = "mcp"
	SurfaceSchedule = "schedule"
	SurfaceOther    = "other"
)

// IdempotentReplays reads the replay counters: tenant → surface → count.
func (o *Orchestrator) IdempotentReplays(ctx context.Context) (map[string]map[string]int64, error) {
	m, err := o.rdb.HGetAll(ctx, o.keys.IdempotentReplays()).Result()
	if err != nil {
		return nil, fmt.Errorf("idempotent replays: %w", err)
	}
	out := map[string]map[string]int64{}
	for field, v := range m {
		tenant, surface, ok := strings.Cut(field, " ")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil {
			continue
		}
		if out[tenant] == nil {
			out[tenant] = map[string]int64{}
		}
		out[tenant][surface] = n
	}
	return out, nil
}
