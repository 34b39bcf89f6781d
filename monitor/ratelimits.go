package monitor

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/ratelimit"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// rateLimitsData is the rate limits page, and /api/ratelimits.
type rateLimitsData struct {
	// File is the rate_limits.yaml read (Config.Project's).
	File string `json:"file"`
	// Problem says why the file does not read; no rules then.
	Problem string    `json:"problem,omitempty"`
	Rules   []rateRow `json:"rules"`
	// Waiting are the threads waiting for a rate limit now (no slot
	// held), oldest first.
	Waiting []rateWaiter `json:"waiting"`
}

// rateRow is one budget of a rule as the page shows it.
type rateRow struct {
	ratelimit.Status
	// Throttled are the refusals by what refused them, in the order the
	// limiter checks.
	Throttled []kindCount `json:"-"`
	// InputUsedRatio and OutputUsedRatio are tokens used over tokens
	// reserved (1: the reservations were right; below: over-estimates);
	// 0 while nothing was reserved.
	InputUsedRatio  float64 `json:"input_used_ratio"`
	OutputUsedRatio float64 `json:"output_used_ratio"`
	// WaitingNow is the threads waiting for a rate limit whose model the
	// rule's glob matches.
	WaitingNow int `json:"waiting_now"`
}

type kindCount struct {
	Kind string
	N    int64
}

// rateWaiter is a thread waiting for a rate limit.
type rateWaiter struct {
	ThreadID  string    `json:"thread_id"`
	Directive string    `json:"directive"`
	Model     string    `json:"model"`
	Queue     string    `json:"queue"`
	Since     time.Time `json:"since"`
	// WakeAt is when its activation is scheduled (the limiter's wait).
	WakeAt time.Time `json:"wake_at,omitzero"`
	// Rules are the globs of the rules that match its model.
	Rules []string `json:"rules"`
}

// serveRateLimits serves the rate limits page (/ratelimits) and its JSON
// (/api/ratelimits): per budget of each rule of the project's
// rate_limits.yaml, its limits, what it holds now, the fleet's counters
// and the threads waiting for it.
func (m *Monitor) serveRateLimits(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	d := rateLimitsData{File: filepath.Join(m.cfg.Project, filepath.FromSlash(config.RateLimitsPath)), Rules: []rateRow{}, Waiting: []rateWaiter{}}
	rl, err := config.LoadRateLimits(os.DirFS(m.cfg.Project))
	if err != nil {
		d.Problem = err.Error()
	}
	st, err := m.limiter.Status(ctx, rl)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	active, err := m.cfg.Orch.Registry.ListActive(ctx)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	for _, rec := range active {
		if rec.Status != thread.StatusWaiting || rec.WaitingFor != registry.WaitingForRateLimit {
			continue
		}
		wt := rateWaiter{ThreadID: rec.ThreadID, Directive: rec.Directive, Model: rec.Model, Queue: rec.Queue, Since: rec.UpdatedAt, Rules: []string{}}
		if at, err := time.Parse(time.RFC3339Nano, rec.Extra["wake_at"]); err == nil {
			wt.WakeAt = at
		}
		if rl != nil {
			for _, rule := range rl.Rules {
				if rule.MatchesModel(rec.Model) && !slices.Contains(wt.Rules, rule.Match) {
					wt.Rules = append(wt.Rules, rule.Match)
				}
			}
		}
		d.Waiting = append(d.Waiting, wt)
	}
	slices.SortFunc(d.Waiting, func(a, b rateWaiter) int { return a.Since.Compare(b.Since) })
	for _, s := range st {
		row := rateRow{Status: s, InputUsedRatio: ratio(s.Counters.InputUsed, s.Counters.InputReserved),
			OutputUsedRatio: ratio(s.Counters.OutputUsed, s.Counters.OutputReserved)}
		for _, k := range ratelimit.Kinds {
			if n := s.Counters.ThrottledBy[k]; n > 0 {
				row.Throttled = append(row.Throttled, kindCount{k, n})
			}
		}
		for _, wt := range d.Waiting {
			if slices.Contains(wt.Rules, s.Rule.Match) {
				row.WaitingNow++
			}
		}
		d.Rules = append(d.Rules, row)
	}
	if r.URL.Path == "/api/ratelimits" {
		writeJSON(w, http.StatusOK, d)
		return
	}
	m.render(w, r, http.StatusOK, m.pages.ratelimits, page{Title: "Rate limits", Nav: "ratelimits", Data: d})
}

func ratio(part, whole int64) float64 {
	if whole <= 0 {
		return 0
	}
	return float64(part) / float64(whole)
}

// kindName says what refused an admission (ratelimit.Kinds).
func kindName(kind string) string {
	switch kind {
	case "req":
		return "requests"
	case "in":
		return "input tokens"
	case "out":
		return "output tokens"
	case "conc":
		return "concurrency"
	case "block":
		return "provider 429"
	case "priority":
		return "higher priority waiting"
	}
	return kind
}
