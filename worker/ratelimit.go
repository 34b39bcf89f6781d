package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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

// rateRules are the rules that apply to the thread's model calls (once per
// activation).
func (s *session) rateRules() []config.RateRule {
	if s.rates == nil {
		api, key := provider.Route(s.rec.Model, *s.w.cfg.Provider)
		keyID := ""
		if key != "" {
			sum := sha256.Sum256([]byte(key))
			keyID = hex.EncodeToString(sum[:4])
		}
		s.rates = s.proj.RateLimits.Match(s.rec.Model, api, keyID)
		if s.rates == nil {
			s.rates = []config.RateRule{}
		}
	}
	return s.rates
}

// admit waits, in the slot, until the rules admit the call, or hands the
// thread back (errRateLimited) when the wait is long. adm is to be
// settled after the call.
func (s *session) admit(ctx context.Context, req *provider.Request) (ratelimit.Admission, error) {
	rules := s.rateRules()
	if len(rules) == 0 {
		return ratelimit.Admission{}, nil
	}
	since := s.msgs
	if n := s.st.SinceResponse; n < len(s.msgs) {
		since = s.msgs[len(s.msgs)-n:]
	}
	in, _ := provider.ContextUsage(s.st.LastPromptTokens, since, 0)
	call := ratelimit.Call{Holder: s.id() + "/" + s.claim.Token, InputTokens: in, OutputTokens: req.MaxTokens,
		Priority: s.w.cfg.Queues[s.rec.Queue], LeaseTTL: s.leaseTTL}
	for {
		adm, err := s.w.limiter.Admit(ctx, rules, call)
		if err != nil {
			return adm, err
		}
		if adm.OK {
			s.w.metrics.rateAdmitted(adm)
			return adm, nil
		}
		s.w.metrics.rateThrottled(adm.Rule, adm.Kind)
		// A slot frees when some call ends, which nobody can tell in
		// advance: a thread refused for concurrency does not wait in its
		// slot either.
		if adm.Wait >= s.w.cfg.RetryHandBack || adm.Kind == "conc" {
			return adm, s.handBackForRateLimit(ctx, adm)
		}
		if err := s.waitToRetry(ctx, adm.Wait); err != nil {
			return adm, err
		}
	}
}

// handBackForRateLimit checkpoints the thread and suspends it until the
// limiter's wait is over, with the activation that continues it scheduled
// then: no slot is held meanwhile.
func (s *session) handBackForRateLimit(ctx context.Context, adm ratelimit.Admission) error {
	at, err := s.suspendForRateLimit(ctx, adm.Wait)
	if err != nil {
		return err
	}
	s.w.metrics.rateHandedBack(adm.Rule)
	if err := s.w.limiter.HandedBack(ctx, adm.Rule); err != nil {
		s.log.Warn("rate limit hand-back not counted", "rule", adm.Rule, "error", err)
	}
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

// holdLease renews the call's concurrency leases while it runs; the
// returned func stops it.
func (s *session) holdLease(adm ratelimit.Admission) func() {
	if len(adm.Reserved) == 0 {
		return func() {}
	}
	ttl := s.leaseTTL
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
				if err := s.w.limiter.Renew(context.Background(), adm, s.id()+"/"+s.claim.Token, ttl); err != nil {
					s.log.Warn("rate limit lease not renewed", "error", err)
				}
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// settle corrects the reservation to the usage the call reported (none
// for a failed call) and releases its concurrency lease; a 429 with
// retry-after blocks the rules for every worker.
func (s *session) settle(ctx context.Context, adm ratelimit.Admission, resp *provider.Response, callErr error) {
	if len(adm.Reserved) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	in, out := 0, 0
	if resp != nil {
		in, out = resp.Usage.PromptTokens(), resp.Usage.OutputTokens
	}
	if err := s.w.limiter.Settle(ctx, adm, s.id()+"/"+s.claim.Token, in, out); err != nil {
		s.log.Warn("rate limit not settled", "error", err)
	}
	s.w.metrics.rateSettled(adm, in, out)
	if pe := provider.Classify(callErr); callErr != nil && pe.Class == provider.ClassRateLimited && pe.RetryAfter > 0 {
		if err := s.w.limiter.Block(ctx, s.rateRules(), pe.RetryAfter); err != nil {
			s.log.Warn("rate limit not blocked after a 429", "error", err)
		}
	}
}
