package monitor

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/ratelimit"
	"github.com/spool-run/spool/spooltype"
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
	rl, st, err := m.rateStatus(ctx)
	if rl == nil && err != nil {
		d.Problem = err.Error()
	} else if err != nil {
		m.fail(w, r, err)
		return
	}
	active, err := m.cfg.Orch.Active(ctx)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	d.Waiting = append(d.Waiting, rateWaiters(active, rl)...)
	for _, s := range st {
		d.Rules = append(d.Rules, newRateRow(s, d.Waiting))
	}
	if r.URL.Path == "/api/ratelimits" {
		writeJSON(w, http.StatusOK, d)
		return
	}
	m.render(w, r, http.StatusOK, m.pages.ratelimits, page{Title: "Rate limits", Nav: "ratelimits", Data: d})
}

// rateWaiters are the threads of active waiting for a rate limit, oldest
// first, each with the globs of the rules of rl (none when nil) that
// match its model.
func rateWaiters(active []*spooltype.Record, rl *config.RateLimits) []rateWaiter {
	var out []rateWaiter
	for _, rec := range active {
		if rec.Status != thread.StatusWaiting || rec.WaitingFor != orchestrator.WaitingForRateLimit {
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
		out = append(out, wt)
	}
	slices.SortFunc(out, func(a, b rateWaiter) int { return a.Since.Compare(b.Since) })
	return out
}

// newRateRow is the row of budget s: its used-over-reserved ratios, its
// refusals by what refused them, and how many of waiting wait for its
// rule.
func newRateRow(s ratelimit.Status, waiting []rateWaiter) rateRow {
	row := rateRow{Status: s, InputUsedRatio: ratio(s.Counters.InputUsed, s.Counters.InputReserved),
		OutputUsedRatio: ratio(s.Counters.OutputUsed, s.Counters.OutputReserved)}
	for _, k := range ratelimit.Kinds {
		if n := s.Counters.ThrottledBy[k]; n > 0 {
			row.Throttled = append(row.Throttled, kindCount{k, n})
		}
	}
	for _, wt := range waiting {
		if slices.Contains(wt.Rules, s.Rule.Match) {
			row.WaitingNow++
		}
	}
	return row
}

// rateStatus reads Config.Project's rate_limits.yaml and the status of
// its budgets; a file that does not read is an error with a nil rl.
func (m *Monitor) rateStatus(ctx context.Context) (rl *config.RateLimits, st []ratelimit.Status, err error) {
	if rl, err = config.LoadRateLimits(os.DirFS(m.cfg.Project)); err != nil {
		return nil, nil, err
	}
	st, err = m.limiter.Status(ctx, rl)
	return rl, st, err
}

// pctOf renders a ratio as a percentage: one decimal below 10%.
func pctOf(ratio float64) string {
	if ratio*100 < 10 {
		return fmt.Sprintf("%.1f", ratio*100)
	}
	return fmt.Sprintf("%.0f", ratio*100)
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

// rateCollector exports the fleet's rate-limit counters of the project's
// rules on /metrics, read from Redis on each scrape (the workers' own
// spool_ratelimit_* counters are each worker's share): by budget (rule,
// the budget id the workers' metrics use) and match (its glob).
type rateCollector struct {
	m                                            *Monitor
	admitted, throttled, waiting, tokens, flight *prometheus.Desc
}

func newRateCollector(m *Monitor) *rateCollector {
	l := []string{"rule", "match"}
	return &rateCollector{m: m,
		admitted:  prometheus.NewDesc("spool_ratelimit_fleet_admitted_total", "Model calls a rate-limit budget admitted, fleet-wide.", l, nil),
		throttled: prometheus.NewDesc("spool_ratelimit_fleet_throttled_total", "Admissions a rate-limit budget refused, fleet-wide, by what refused them.", append(l, "kind"), nil),
		waiting:   prometheus.NewDesc("spool_ratelimit_fleet_waiting_total", "Threads handed back to wait for a rate-limit budget, fleet-wide.", l, nil),
		tokens:    prometheus.NewDesc("spool_ratelimit_fleet_tokens_total", "Tokens per rate-limit budget, fleet-wide: reserved before calls, used as the providers reported.", append(l, "kind", "stage"), nil),
		flight:    prometheus.NewDesc("spool_ratelimit_fleet_in_flight", "Concurrency leases a rate-limit budget holds now.", l, nil),
	}
}

func (c *rateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.admitted, c.throttled, c.waiting, c.tokens, c.flight} {
		ch <- d
	}
}

func (c *rateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, st, err := c.m.rateStatus(ctx)
	if err != nil {
		c.m.cfg.Logger.Warn("monitor: metrics: rate limits", "error", err)
		return
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, s := range st {
		if s.Rule.ID == "" {
			continue // a per_key rule no call used
		}
		id, match := s.Rule.ID, s.Rule.Match
		k := s.Counters
		counter(c.admitted, k.Admitted, id, match)
		counter(c.waiting, k.Waiting, id, match)
		for _, kind := range ratelimit.Kinds {
			counter(c.throttled, k.ThrottledBy[kind], id, match, kind)
		}
		counter(c.tokens, k.InputReserved, id, match, "input", "reserved")
		counter(c.tokens, k.InputUsed, id, match, "input", "used")
		counter(c.tokens, k.OutputReserved, id, match, "output", "reserved")
		counter(c.tokens, k.OutputUsed, id, match, "output", "used")
		ch <- prometheus.MustNewConstMetric(c.flight, prometheus.GaugeValue, float64(s.InFlight), id, match)
	}
}
