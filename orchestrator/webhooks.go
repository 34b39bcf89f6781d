package orchestrator

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/registry"
)

// Webhooks on run events (CLI.md "Operating a fleet"; docs/design.md
// "Webhooks"), in three steps, each durable before the next:
//
//  1. The script that ends a root (registry.commit: completed, error,
//     cancelled) or suspends a run for approval appends the event to its
//     shard's outbox, when its tree has webhooks (Record.Webhooks): the
//     event exists exactly when the status does.
//  2. One worker at a time (HoldWebhookRelay) relays the outboxes
//     (RelayWebhooks): each event becomes one delivery per endpoint that
//     subscribes to it (webhooks.yaml, and the run's --notify URL), each
//     made once by webhook_make.lua, then the relay's cursor for that
//     outbox moves past it. The cursor lives beside the deliveries, on
//     the namespace's slot: a relay that dies before moving it makes
//     nothing twice, and a failover that loses deliveries loses the
//     cursor's advance past them, so they are made again. Entries stay in
//     the outbox a day (WebhookOutboxKeep) for that.
//  3. Every worker takes due deliveries (ClaimWebhooks), one attempt each
//     under a lease, and records the outcome (WebhookAttempted): delivered,
//     retrying with backoff, or failed after WebhookMaxAttempts. A worker
//     that dies mid-attempt leaves the delivery due when its lease lapses.
//
// So a delivery is at least once, and every attempt of it carries the same
// webhook-id (its event's): the receiver dedupes on it.

// Delivery states.
const (
	DeliveryPending    = "pending"
	DeliveryDelivering = "delivering"
	DeliveryRetrying   = "retrying"
	DeliveryDelivered  = "delivered"
	DeliveryFailed     = "failed"
)

// DeliveryStatuses are a delivery's states, in the order it goes through
// them.
var DeliveryStatuses = []string{DeliveryPending, DeliveryDelivering, DeliveryRetrying, DeliveryDelivered, DeliveryFailed}

const (
	// WebhookOutboxKeep is how long an outbox entry is kept after it was
	// written, relayed or not: what a relay whose cursor went back (a
	// failover of the namespace's node) can make again.
	WebhookOutboxKeep = 24 * time.Hour
	// WebhookRetention is how long a delivery's record is kept.
	WebhookRetention = 7 * 24 * time.Hour
	// WebhookMaxAttempts is how many attempts a delivery gets before it
	// fails (redeliver asks again). With backoff doubling from a second
	// to an hour, the last is about seven hours after the first.
	WebhookMaxAttempts = 16
	// WebhookMaxBackoff caps the wait between attempts.
	WebhookMaxBackoff = time.Hour
	// NotifySecretEnv is the environment variable holding the signing
	// secret of --notify deliveries (unsigned when the worker has none).
	NotifySecretEnv = "SPOOL_NOTIFY_SECRET"
)

// ErrDeliveryNotFound is the error of no such webhook delivery (never made, or past
// WebhookRetention).
var ErrDeliveryNotFound = errors.New("webhook delivery not found")

//go:embed webhook_make.lua
var webhookMakeLua string

//go:embed webhook_claim.lua
var webhookClaimLua string

//go:embed webhook_done.lua
var webhookDoneLua string

//go:embed webhook_redeliver.lua
var webhookRedeliverLua string

//go:embed webhook_hold.lua
var webhookHoldLua string

var (
	webhookMakeScript      = redisfn.New("webhook_make", "", webhookMakeLua)
	webhookClaimScript     = redisfn.New("webhook_claim", "", webhookClaimLua)
	webhookDoneScript      = redisfn.New("webhook_done", "", webhookDoneLua)
	webhookRedeliverScript = redisfn.New("webhook_redeliver", "", webhookRedeliverLua)
	webhookHoldScript      = redisfn.New("webhook_hold", "", webhookHoldLua)
)

// WebhookDelivery is one event's delivery to one endpoint.
type WebhookDelivery struct {
	ID string `json:"id"`
	// EventID is the webhook-id header of every attempt: the same for
	// the event at every endpoint and on every attempt.
	EventID  string `json:"event_id"`
	Type     string `json:"type"`
	Endpoint string `json:"endpoint"`
	URL      string `json:"url"`
	// SecretEnv names the environment variable of the signing secret.
	SecretEnv string `json:"secret_env,omitempty"`
	Run       string `json:"run"`
	Tenant    string `json:"tenant"`
	Status    string `json:"status"`
	Attempts  int    `json:"attempts"`
	// LastCode is the last answer's HTTP status (0: none came), LastError
	// why the last attempt failed.
	LastCode      int        `json:"last_code,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
	Redeliveries  int        `json:"redeliveries,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	NextAt        *time.Time `json:"next_at,omitempty"`
	LastAttemptAt *time.Time `json:"last_attempt_at,omitempty"`
	DeliveredAt   *time.Time `json:"delivered_at,omitempty"`
	// Body is what every attempt POSTs.
	Body json.RawMessage `json:"-"`
}

// WebhookEvent is a delivery's body: {"type", "timestamp", "run"}, and
// for budget.threshold the share of the tree's spend limit crossed
// (50, 80 or 100 percent).
type WebhookEvent struct {
	Type      string           `json:"type"`
	Timestamp string           `json:"timestamp"`
	Threshold int              `json:"threshold,omitempty"`
	Run       *registry.Record `json:"run"`
}

// WebhookEventID is the webhook-id of event typ of run id (key tells one
// from another of the same type: "" for an end): "msg_" and 24 hex digits
// of its SHA-256.
func WebhookEventID(id, typ, key string) string {
	h := sha256.Sum256([]byte(id + "\x00" + typ + "\x00" + key))
	return "msg_" + hex.EncodeToString(h[:12])
}

// webhookDeliveryID names the delivery of event eventID to endpoint.
func webhookDeliveryID(eventID, endpoint string) string {
	h := sha256.Sum256([]byte(eventID + "\x00" + endpoint))
	return "dlv_" + hex.EncodeToString(h[:12])
}

// WebhookBackoff is the wait after failed attempt n (1-based): a second
// doubling, at most WebhookMaxBackoff; base scales it (0: a second).
func WebhookBackoff(n int, base time.Duration) time.Duration {
	if base <= 0 {
		base = time.Second
	}
	d := base
	for i := 1; i < n && d < WebhookMaxBackoff; i++ {
		d *= 2
	}
	return min(d, WebhookMaxBackoff)
}

// HoldWebhookRelay takes or renews, for lease, the relay of the outboxes
// for the process with token; false when another holds it.
func (rt *Runtime) HoldWebhookRelay(ctx context.Context, token string, lease time.Duration) (bool, error) {
	n, err := webhookHoldScript.Run(ctx, rt.fast, []string{rt.keys.Lock("webhook-relay")}, token, lease.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("webhook relay: %w", err)
	}
	return n == 1, nil
}

// RelayWebhooks turns the outboxes' events past the relay's cursors (at
// most per shard each) into deliveries, moving each cursor past each
// event once its deliveries are made; it returns how many events it
// relayed, and trims what is past WebhookOutboxKeep. An event whose run
// Redis no longer has is passed over; one whose project cannot be loaded
// goes to its --notify URL only, and the error is returned after the rest
// are relayed.
func (rt *Runtime) RelayWebhooks(ctx context.Context, per int64) (int, error) {
	n := 0
	var firstErr error
	for _, ob := range rt.keys.AllOutbox() {
		from, err := rt.rdb.HGet(ctx, rt.keys.WebhookRelayed(), ob).Result()
		switch {
		case errors.Is(err, redis.Nil):
			from = "-"
		case err != nil:
			return n, fmt.Errorf("read the relay's cursor: %w", err)
		default:
			from = "(" + from
		}
		entries, err := rt.rdb.XRangeN(ctx, ob, from, "+", per).Result()
		if err != nil {
			return n, fmt.Errorf("read outbox: %w", err)
		}
		for _, e := range entries {
			if err := rt.relayEvent(ctx, e); err != nil {
				if ctx.Err() != nil {
					return n, ctx.Err()
				}
				if firstErr == nil {
					firstErr = err
				}
			}
			if err := rt.rdb.HSet(ctx, rt.keys.WebhookRelayed(), ob, e.ID).Err(); err != nil {
				return n, fmt.Errorf("move the relay's cursor: %w", err)
			}
			n++
		}
		minID := strconv.FormatInt(rt.Now().Add(-WebhookOutboxKeep).UnixMilli(), 10)
		if err := rt.rdb.XTrimMinIDApprox(ctx, ob, minID, 0).Err(); err != nil {
			return n, fmt.Errorf("trim outbox: %w", err)
		}
	}
	return n, firstErr
}

// relayEvent makes event e's deliveries.
func (rt *Runtime) relayEvent(ctx context.Context, e redis.XMessage) error {
	str := func(k string) string { s, _ := e.Values[k].(string); return s }
	id, typ, at, key := str("thread"), str("type"), str("at"), str("key")
	rec, err := rt.reg.Get(ctx, id)
	if errors.Is(err, registry.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	type target struct{ name, url, secretEnv string }
	var targets []target
	proj, projErr := rt.Project(ctx, rec.Bundle)
	if projErr == nil && proj.Webhooks != nil {
		for _, ep := range proj.Webhooks.For(typ) {
			targets = append(targets, target{ep.Name, ep.URL, ep.SecretEnv})
		}
	}
	if rec.Notify != "" && strings.HasPrefix(typ, "run.") {
		targets = append(targets, target{config.NotifyEndpoint, rec.Notify, NotifySecretEnv})
	}
	if len(targets) == 0 {
		return projErr
	}
	ev := WebhookEvent{Type: typ, Timestamp: at, Run: rec}
	if typ == config.EventBudgetThreshold {
		ev.Threshold, _ = strconv.Atoi(key)
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	eventID := WebhookEventID(id, typ, key)
	now := rt.Now()
	for _, t := range targets {
		did := webhookDeliveryID(eventID, t.name)
		keys := []string{rt.keys.WebhookDelivery(did), rt.keys.WebhookDue(), rt.keys.WebhookAll(), rt.keys.WebhookStats()}
		err := webhookMakeScript.Run(ctx, rt.fast, keys, did, now.UnixMilli(), int64(WebhookRetention/time.Second),
			"id", did, "event_id", eventID, "type", typ, "endpoint", t.name, "url", t.url, "secret_env", t.secretEnv,
			"run", id, "tenant", rec.TenantOrDefault(), "body", string(body), "created_at", now.UTC().Format(time.RFC3339Nano)).Err()
		if err != nil {
			return fmt.Errorf("make webhook delivery: %w", err)
		}
	}
	return projErr
}

// ClaimWebhooks takes up to n due deliveries for one attempt each, under
// lease.
func (rt *Runtime) ClaimWebhooks(ctx context.Context, n int, lease time.Duration) ([]*WebhookDelivery, error) {
	now := rt.Now().UnixMilli()
	ids, err := rt.rdb.ZRangeByScore(ctx, rt.keys.WebhookDue(), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now, 10), Count: int64(n)}).Result()
	if err != nil {
		return nil, fmt.Errorf("due webhooks: %w", err)
	}
	var out []*WebhookDelivery
	for _, id := range ids {
		res, err := webhookClaimScript.Run(ctx, rt.fast, []string{rt.keys.WebhookDue(), rt.keys.WebhookDelivery(id)}, id, now, lease.Milliseconds()).StringSlice()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("claim webhook %s: %w", id, err)
		}
		m := make(map[string]string, len(res)/2)
		for i := 0; i+1 < len(res); i += 2 {
			m[res[i]] = res[i+1]
		}
		out = append(out, parseDelivery(m))
	}
	return out, nil
}

// WebhookAttempted records the outcome of an attempt of d: delivered when
// err is nil, else due again after backoff (WebhookBackoff from base)
// or, after WebhookMaxAttempts, failed. code is the answer's status (0:
// none came).
func (rt *Runtime) WebhookAttempted(ctx context.Context, d *WebhookDelivery, code int, attemptErr error, base time.Duration) error {
	now := rt.Now()
	outcome, next, msg := DeliveryDelivered, int64(0), ""
	if attemptErr != nil {
		msg = attemptErr.Error()
		outcome = DeliveryRetrying
		if d.Attempts >= WebhookMaxAttempts {
			outcome = DeliveryFailed
		} else {
			next = now.Add(WebhookBackoff(d.Attempts, base)).UnixMilli()
		}
	}
	err := webhookDoneScript.Run(ctx, rt.fast, []string{rt.keys.WebhookDue(), rt.keys.WebhookDelivery(d.ID), rt.keys.WebhookStats()}, d.ID, outcome, next, code, msg,
		now.UTC().Format(time.RFC3339Nano)).Err()
	if err != nil {
		return fmt.Errorf("record webhook %s: %w", d.ID, err)
	}
	return nil
}

// DeliveryFilter selects deliveries: an endpoint's, in a status, of a
// tenant ("" for any), at most Limit (0: 100).
type DeliveryFilter struct {
	Endpoint, Status, Tenant string
	Limit                    int
}

func (f DeliveryFilter) match(d *WebhookDelivery) bool {
	return (f.Endpoint == "" || d.Endpoint == f.Endpoint) && (f.Status == "" || d.Status == f.Status) &&
		(f.Tenant == "" || d.Tenant == f.Tenant)
}

// WebhookDeliveries lists the deliveries kept that f selects, newest
// first, reading them a page at a time until it has f.Limit.
func (o *Orchestrator) WebhookDeliveries(ctx context.Context, f DeliveryFilter) ([]*WebhookDelivery, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	var out []*WebhookDelivery
	const page = 500
	for start := int64(0); len(out) < limit; start += page {
		ids, err := o.rdb.ZRevRange(ctx, o.keys.WebhookAll(), start, start+page-1).Result()
		if err != nil {
			return nil, fmt.Errorf("list webhook deliveries: %w", err)
		}
		ds, err := o.deliveries(ctx, ids)
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			if f.match(d) {
				out = append(out, d)
			}
		}
		if len(ids) < page {
			break
		}
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// WebhookDelivery is delivery id; ErrDeliveryNotFound when there is none.
func (o *Orchestrator) WebhookDelivery(ctx context.Context, id string) (*WebhookDelivery, error) {
	ds, err := o.deliveries(ctx, []string{id})
	if err != nil {
		return nil, err
	}
	if len(ds) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrDeliveryNotFound, id)
	}
	return ds[0], nil
}

// deliveries reads the records of ids in one pipeline, skipping the gone.
func (o *Orchestrator) deliveries(ctx context.Context, ids []string) ([]*WebhookDelivery, error) {
	pipe := o.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGetAll(ctx, o.keys.WebhookDelivery(id))
	}
	if len(ids) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("read webhook deliveries: %w", err)
		}
	}
	var out []*WebhookDelivery
	for _, c := range cmds {
		if m := c.Val(); len(m) > 0 {
			out = append(out, parseDelivery(m))
		}
	}
	return out, nil
}

// Redeliver asks delivery id again: due now, with the same event id and
// body, its attempts counted afresh.
func (o *Orchestrator) Redeliver(ctx context.Context, id string) (*WebhookDelivery, error) {
	n, err := webhookRedeliverScript.Run(ctx, o.fast, []string{o.keys.WebhookDue(), o.keys.WebhookDelivery(id)}, id, o.Now().UnixMilli()).Int()
	if err != nil {
		return nil, fmt.Errorf("redeliver %s: %w", id, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: %s", ErrDeliveryNotFound, id)
	}
	return o.WebhookDelivery(ctx, id)
}

// WebhookStats are the webhook deliveries' counters since the namespace
// began (never trimmed by retention): by endpoint, the deliveries made
// and the attempts by outcome; and the deliveries due now or later
// (pending or retrying), with the oldest one's due time (zero: none).
type WebhookStats struct {
	Made      map[string]int64            `json:"made"`
	Attempts  map[string]map[string]int64 `json:"attempts"`
	Due       int64                       `json:"due"`
	OldestDue time.Time                   `json:"oldest_due,omitzero"`
}

// WebhookStats reads the counters (WebhookStats), in one round trip.
func (o *Orchestrator) WebhookStats(ctx context.Context) (WebhookStats, error) {
	pipe := o.fast.Pipeline()
	all := pipe.HGetAll(ctx, o.keys.WebhookStats())
	due := pipe.ZCard(ctx, o.keys.WebhookDue())
	oldest := pipe.ZRangeWithScores(ctx, o.keys.WebhookDue(), 0, 0)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return WebhookStats{}, fmt.Errorf("webhook stats: %w", err)
	}
	st := WebhookStats{Made: map[string]int64{}, Attempts: map[string]map[string]int64{}, Due: due.Val()}
	for f, v := range all.Val() {
		i := strings.LastIndexByte(f, '|')
		n, err := strconv.ParseInt(v, 10, 64)
		if i < 0 || err != nil {
			continue
		}
		ep, what := f[:i], f[i+1:]
		if what == "made" {
			st.Made[ep] = n
			continue
		}
		if st.Attempts[ep] == nil {
			st.Attempts[ep] = map[string]int64{}
		}
		st.Attempts[ep][what] = n
	}
	if z := oldest.Val(); len(z) == 1 {
		st.OldestDue = time.UnixMilli(int64(z[0].Score))
	}
	return st, nil
}

// WebhookCounts are the deliveries kept by endpoint and status.
func WebhookCounts(ds []*WebhookDelivery) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, d := range ds {
		if out[d.Endpoint] == nil {
			out[d.Endpoint] = map[string]int{}
		}
		out[d.Endpoint][d.Status]++
	}
	return out
}

// parseDelivery decodes a delivery's hash.
func parseDelivery(m map[string]string) *WebhookDelivery {
	d := &WebhookDelivery{ID: m["id"], EventID: m["event_id"], Type: m["type"], Endpoint: m["endpoint"], URL: m["url"],
		SecretEnv: m["secret_env"], Run: m["run"], Tenant: m["tenant"], Status: m["status"], LastError: m["last_error"],
		Body: json.RawMessage(m["body"])}
	d.Attempts, _ = strconv.Atoi(m["attempts"])
	d.LastCode, _ = strconv.Atoi(m["last_code"])
	d.Redeliveries, _ = strconv.Atoi(m["redeliveries"])
	d.CreatedAt, _ = time.Parse(time.RFC3339Nano, m["created_at"])
	if ms, err := strconv.ParseInt(m["next_at"], 10, 64); err == nil && ms > 0 && (d.Status == DeliveryPending || d.Status == DeliveryRetrying) {
		t := time.UnixMilli(ms).UTC()
		d.NextAt = &t
	}
	for _, f := range []struct {
		k string
		p **time.Time
	}{{"last_attempt_at", &d.LastAttemptAt}, {"delivered_at", &d.DeliveredAt}} {
		if t, err := time.Parse(time.RFC3339Nano, m[f.k]); err == nil {
			*f.p = &t
		}
	}
	return d
}
