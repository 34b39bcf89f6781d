package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"time"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/ratelimit"
	"github.com/spool-run/spool/registry"
)

// Fleet-wide rate limits (rate_limits.yaml; package ratelimit). Before
// each model call the worker asks the rules that match the call's model
// to admit it, reserving its tokens: input from the context-usage
// estimate, output from max_tokens. A refused call waits in its slot when
// the wait is short (under Config.RetryHandBack); a longer wait, or one
// for a concurrency slot (its length is unknown), checkpoints the thread
// and hands it back (status waiting, waiting_for rate_limit, no slot),
// with an activation scheduled when the limiter says (for concurrency, in
// a second). After the
// call the reservation is settled to the usage the provider reported, and
// a 429 with retry-after blocks the rules for the whole fleet. A call the
// provider itself answers "slow down" (rate_limited) is handed back the
// same way, for the provider's retry-after (handBackForSlowDown). The
// limiter counts admissions, refusals and tokens per budget in Redis
// itself; the worker adds the threads it hands back (Limiter.HandedBack),
// and keeps its own Prometheus counters of the same (metrics.go).

// errRateLimited ends an activation that handed its thread back to wait
// for its rate limit.
var errRateLimited = errors.New("thread handed back until its rate limit admits its model call")

// rateGate holds a thread's model calls to the fleet's rate limits: the
// rules that match its model (looked up once per activation), the
// limiter that admits its calls, renews their concurrency leases and
// settles them, and the counters of both. It holds what those use and
// nothing of the session; a session has one, and hands the thread back
// itself when the gate says the wait is long (session.admit).
type rateGate struct {
	limiter *ratelimit.Limiter
	metrics *Metrics
	log     *slog.Logger
	// holder names the activation's calls to the limiter (thread/token).
	holder string
	// priority is the weight of the thread's queue (Config.Queues).
	priority int
	leaseTTL time.Duration
	// handBackAfter is the shortest wait that is not waited in the slot
	// (Config.RetryHandBack).
	handBackAfter time.Duration
	// model, providers and limits find the rules (rules).
	model     string
	providers *provider.Config
	limits    *config.RateLimits
	// matched are the rules of the thread's model calls; nil until
	// looked up.
	matched []config.RateRule
}

// newRateGate is the gate of the activation of rec that holds claim
// token, under the project's limits.
func newRateGate(w *Worker, rec *registry.Record, token string, limits *config.RateLimits, log *slog.Logger, leaseTTL time.Duration) *rateGate {
	return &rateGate{limiter: w.limiter, metrics: w.metrics, log: log, holder: rec.ThreadID + "/" + token,
		priority: w.cfg.Queues[rec.Queue], leaseTTL: leaseTTL, handBackAfter: w.cfg.RetryHandBack,
		model: rec.Model, providers: w.cfg.Provider, limits: limits}
}

// rules are the rules that apply to the thread's model calls (looked up
// once per activation).
func (g *rateGate) rules() []config.RateRule {
	if g.matched == nil {
		api, key := provider.Route(g.model, *g.providers)
		keyID := ""
		if key != "" {
			sum := sha256.Sum256([]byte(key))
			keyID = hex.EncodeToString(sum[:4])
		}
		g.matched = g.limits.Match([]string{g.model, provider.WireModel(g.model, *g.providers)}, api, keyID)
		if g.matched == nil {
			g.matched = []config.RateRule{}
		}
	}
	return g.matched
}

// admit asks the rules to admit a call of in prompt and out output
// tokens, and waits, in the slot, for a short refusal to pass. A long
// wait, or one for a concurrency slot, is not waited here: the refusal
// is returned (adm.OK false) for the caller to hand the thread back.
func (g *rateGate) admit(ctx context.Context, in, out int) (ratelimit.Admission, error) {
	call := ratelimit.Call{Holder: g.holder, InputTokens: in, OutputTokens: out, Priority: g.priority, LeaseTTL: g.leaseTTL}
	for {
		adm, err := g.limiter.Admit(ctx, g.rules(), call)
		if err != nil {
			return adm, err
		}
		if adm.OK {
			g.metrics.rateAdmitted(adm)
			return adm, nil
		}
		g.metrics.rateThrottled(adm.Rule, adm.Kind)
		// A slot frees when some call ends, which nobody can tell in
		// advance: a thread refused for concurrency does not wait in its
		// slot either.
		if adm.Wait >= g.handBackAfter || adm.Kind == "conc" {
			return adm, nil
		}
		if err := waitToRetry(ctx, adm.Wait); err != nil {
			return adm, err
		}
	}
}

// handedBack counts a thread handed back for adm's refusal, in the
// worker's counters and the limiter's.
func (g *rateGate) handedBack(ctx context.Context, adm ratelimit.Admission) {
	g.metrics.rateHandedBack(adm.Rule)
	if err := g.limiter.HandedBack(ctx, adm.Rule); err != nil {
		g.log.Warn("rate limit hand-back not counted", "rule", adm.Rule, "error", err)
	}
}

// holdLease renews the call's concurrency leases while it runs; the
// returned func stops it.
func (g *rateGate) holdLease(adm ratelimit.Admission) func() {
	if len(adm.Reserved) == 0 {
		return func() {}
	}
	ttl := g.leaseTTL
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := g.limiter.Renew(context.Background(), adm, g.holder, ttl); err != nil {
					g.log.Warn("rate limit lease not renewed", "error", err)
				}
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// settle corrects the reservation to the usage the call reported (none
// for a failed call) and releases its concurrency lease; a 429 with
// retry-after blocks the rules for every worker.
func (g *rateGate) settle(ctx context.Context, adm ratelimit.Admission, resp *provider.Response, callErr error) {
	if len(adm.Reserved) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	in, out := 0, 0
	if resp != nil {
		in, out = resp.Usage.PromptTokens(), resp.Usage.OutputTokens
	}
	if err := g.limiter.Settle(ctx, adm, g.holder, in, out); err != nil {
		g.log.Warn("rate limit not settled", "error", err)
	}
	g.metrics.rateSettled(adm, in, out)
	if pe := provider.Classify(callErr); callErr != nil && pe.Class == provider.ClassRateLimited && pe.RetryAfter > 0 {
		if err := g.limiter.Block(ctx, g.rules(), pe.RetryAfter); err != nil {
			g.log.Warn("rate limit not blocked after a 429", "error", err)
		}
	}
}

// admit waits, in the slot, until the thread's rate limits admit the
// call (rateGate.admit), or hands the thread back (errRateLimited) when
// the wait is long. adm is to be settled after the call. The call's
// prompt is estimated from the conversation only when rules apply.
func (s *session) admit(ctx context.Context, req *provider.Request) (ratelimit.Admission, error) {
	if len(s.rates.rules()) == 0 {
		return ratelimit.Admission{}, nil
	}
	in, _ := provider.ContextUsage(s.st.LastPromptTokens, s.msgs.since(s.st.SinceResponse), 0)
	adm, err := s.rates.admit(ctx, in, req.MaxTokens)
	if err == nil && !adm.OK {
		return adm, s.handBackForRateLimit(ctx, adm)
	}
	return adm, err
}

// handBackForRateLimit checkpoints the thread and suspends it until the
// limiter's wait is over, with the activation that continues it scheduled
// then: no slot is held meanwhile.
func (s *session) handBackForRateLimit(ctx context.Context, adm ratelimit.Admission) error {
	at, err := s.suspendForRateLimit(ctx, adm.Wait)
	if err != nil {
		return err
	}
	s.rates.handedBack(ctx, adm)
	s.log.Info("model call waits for its rate limit; thread handed back", "rule", adm.Rule, "kind", adm.Kind, "wait", adm.Wait, "wake_at", at)
	return errRateLimited
}

// handBackForSlowDown hands back a thread whose provider answered its
// model call "slow down" (rate_limited: a 429, an overload), to call again
// after delay (the provider's retry-after, else the error hooks' backoff),
// as the limiter's hand-back does: waiting for rate_limit, holding no
// slot, however long and however often the provider says so, until the
// call goes through or the thread's duration limit ends it.
func (s *session) handBackForSlowDown(ctx context.Context, delay time.Duration) error {
	at, err := s.suspendForRateLimit(ctx, delay)
	if err != nil {
		return err
	}
	s.log.Info("provider says slow down; thread handed back", "rate_limited", s.st.RateLimited, "delay", delay, "wake_at", at)
	return errRateLimited
}

// suspendForRateLimit checkpoints the thread and suspends it (waiting for
// rate_limit) for wait, with the activation that continues it scheduled
// then; it returns when that is. A wait past the thread's duration limit
// ends there: that activation finds the limit reached and ends the
// thread, instead of the thread waiting longer than it may run.
func (s *session) suspendForRateLimit(ctx context.Context, wait time.Duration) (time.Time, error) {
	at := s.o.Now().Add(wait)
	if end, ok := durationEnd(s.rec); ok && end.Before(at) {
		at = end
	}
	s.st.RetryAt = at.UTC()
	if err := s.checkpoint(ctx); err != nil {
		return at, err
	}
	seq, err := s.acts.SuspendUntil(ctx, s.id(), s.version, registry.WaitingForRateLimit, at)
	if err != nil {
		return at, err
	}
	s.version = seq
	return at, s.enq.Enqueue(ctx, queue.Activation{ThreadID: s.id(), Reason: "timeout"}, seq, s.rec.Queue, asynqProcessAt(at))
}
