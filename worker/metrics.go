package worker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/ratelimit"
)

// Metrics are the worker's Prometheus collectors. A nil *Metrics records
// nothing.
type Metrics struct {
	Turns          *prometheus.CounterVec
	Tokens         *prometheus.CounterVec
	Spend          *prometheus.CounterVec
	TurnLatency    *prometheus.HistogramVec
	Finished       *prometheus.CounterVec
	ProviderErrors *prometheus.CounterVec
	Suspensions    prometheus.Counter
	// CheckpointLatency is the time of a checkpoint's durable part: the
	// registry fence, the signed segment (create-only) and the charge.
	CheckpointLatency prometheus.Histogram
	// LedgerRejections counts what the ledger refused: a child not
	// started for lack of budget (kind reserve: no room to admit it, or
	// its guaranteed amount did not fit) and a charge clamped to what was
	// left (kind charge).
	LedgerRejections *prometheus.CounterVec
	// StorageRetries counts blob store operations tried again after a
	// failure (an outage the worker rides out), by operation.
	StorageRetries *prometheus.CounterVec
	// Recharged counts turn charges an activation found missing from the
	// ledger when it restored its thread (Redis lost them) and applied
	// again from the transcript.
	Recharged prometheus.Counter
	// RateAdmitted, RateThrottled (by kind: req, in, out, conc, block,
	// priority) and RateHandedBack count model calls per rate-limit rule;
	// RateTokens counts tokens per rule, kind (input, output) and stage
	// (reserved, used).
	RateAdmitted   *prometheus.CounterVec
	RateThrottled  *prometheus.CounterVec
	RateHandedBack *prometheus.CounterVec
	RateTokens     *prometheus.CounterVec
	// GraphSteps counts graph steps by graph and status (ok, error,
	// retry); GraphRuns counts graph runs finished by graph and status.
	GraphSteps *prometheus.CounterVec
	GraphRuns  *prometheus.CounterVec
}

// NewMetrics registers the worker's collectors with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Turns:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_turns_total", Help: "Model turns run."}, []string{"directive", "model"}),
		Tokens:         prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_tokens_total", Help: "Tokens by kind."}, []string{"directive", "model", "kind"}),
		Spend:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_spend_usd_total", Help: "Spend in USD."}, []string{"directive", "model"}),
		TurnLatency:    prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "spool_model_call_seconds", Help: "Model call latency.", Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12)}, []string{"model"}),
		Finished:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_threads_finished_total", Help: "Threads finished by status."}, []string{"directive", "status"}),
		ProviderErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_provider_errors_total", Help: "Provider errors by class."}, []string{"class"}),
		Suspensions:    prometheus.NewCounter(prometheus.CounterOpts{Name: "spool_thread_suspensions_total", Help: "Threads suspended to wait on children."}),
		CheckpointLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spool_checkpoint_seconds",
			Help: "Checkpoint latency: registry fence, signed segment, charge.", Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12)}),
		LedgerRejections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_ledger_rejections_total",
			Help: "Ledger refusals: children not started for lack of budget (reserve), charges clamped (charge)."}, []string{"kind"}),
		StorageRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_storage_retries_total",
			Help: "Blob store operations tried again after a failure."}, []string{"op"}),
		Recharged: prometheus.NewCounter(prometheus.CounterOpts{Name: "spool_worker_recharged_turns_total",
			Help: "Turn charges missing from the ledger (lost Redis writes) that a restoring activation applied again from the transcript."}),
		RateAdmitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_ratelimit_admitted_total",
			Help: "Model calls a rate-limit rule admitted."}, []string{"rule"}),
		RateThrottled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_ratelimit_throttled_total",
			Help: "Model call admissions a rate-limit rule refused, by what refused them."}, []string{"rule", "kind"}),
		RateHandedBack: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_ratelimit_waiting_total",
			Help: "Threads handed back to wait for a rate limit (no slot held)."}, []string{"rule"}),
		RateTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_ratelimit_tokens_total",
			Help: "Tokens per rate-limit rule: reserved before calls, used as the provider reported."}, []string{"rule", "kind", "stage"}),
		GraphSteps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_graph_steps_total",
			Help: "Graph steps completed, by graph and status (ok, error, retry)."}, []string{"graph", "status"}),
		GraphRuns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_graph_runs_total",
			Help: "Graph runs finished, by graph and status."}, []string{"graph", "status"}),
	}
	if reg != nil {
		reg.MustRegister(m.Turns, m.Tokens, m.Spend, m.TurnLatency, m.Finished, m.ProviderErrors, m.Suspensions,
			m.CheckpointLatency, m.LedgerRejections, m.StorageRetries, m.Recharged, m.RateAdmitted, m.RateThrottled, m.RateHandedBack, m.RateTokens,
			m.GraphSteps, m.GraphRuns)
	}
	return m
}

func (m *Metrics) observeTurn(directive, model string, d time.Duration) {
	if m == nil {
		return
	}
	m.Turns.WithLabelValues(directive, model).Inc()
	m.TurnLatency.WithLabelValues(model).Observe(d.Seconds())
}

func (m *Metrics) tokens(directive, model string, u provider.Usage, spend float64) {
	if m == nil {
		return
	}
	m.Tokens.WithLabelValues(directive, model, "input").Add(float64(u.InputTokens))
	m.Tokens.WithLabelValues(directive, model, "output").Add(float64(u.OutputTokens))
	m.Tokens.WithLabelValues(directive, model, "cache_read").Add(float64(u.CacheReadTokens))
	m.Tokens.WithLabelValues(directive, model, "cache_write").Add(float64(u.CacheWriteTokens))
	m.Spend.WithLabelValues(directive, model).Add(spend)
}

func (m *Metrics) finished(directive, status string) {
	if m != nil {
		m.Finished.WithLabelValues(directive, status).Inc()
	}
}

func (m *Metrics) providerError(class string) {
	if m != nil {
		m.ProviderErrors.WithLabelValues(class).Inc()
	}
}

func (m *Metrics) suspended() {
	if m != nil {
		m.Suspensions.Inc()
	}
}

func (m *Metrics) checkpointed(d time.Duration) {
	if m != nil {
		m.CheckpointLatency.Observe(d.Seconds())
	}
}

func (m *Metrics) ledgerRejected(kind string) {
	if m != nil {
		m.LedgerRejections.WithLabelValues(kind).Inc()
	}
}

func (m *Metrics) storageRetried(op string) {
	if m != nil {
		m.StorageRetries.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) recharged(n int) {
	if m != nil {
		m.Recharged.Add(float64(n))
	}
}

func (m *Metrics) rateAdmitted(adm ratelimit.Admission) {
	if m == nil {
		return
	}
	for _, r := range adm.Reserved {
		m.RateAdmitted.WithLabelValues(r.Rule.ID).Inc()
		m.RateTokens.WithLabelValues(r.Rule.ID, "input", "reserved").Add(float64(r.In))
		m.RateTokens.WithLabelValues(r.Rule.ID, "output", "reserved").Add(float64(r.Out))
	}
}

func (m *Metrics) rateSettled(adm ratelimit.Admission, in, out int) {
	if m == nil {
		return
	}
	for _, r := range adm.Reserved {
		m.RateTokens.WithLabelValues(r.Rule.ID, "input", "used").Add(float64(in))
		m.RateTokens.WithLabelValues(r.Rule.ID, "output", "used").Add(float64(out))
	}
}

func (m *Metrics) rateThrottled(rule, kind string) {
	if m != nil {
		m.RateThrottled.WithLabelValues(rule, kind).Inc()
	}
}

func (m *Metrics) rateHandedBack(rule string) {
	if m != nil {
		m.RateHandedBack.WithLabelValues(rule).Inc()
	}
}

func (m *Metrics) graphStep(graph, status string) {
	if m != nil {
		m.GraphSteps.WithLabelValues(graph, status).Inc()
	}
}

func (m *Metrics) graphRun(graph, status string) {
	if m != nil {
		m.GraphRuns.WithLabelValues(graph, status).Inc()
	}
}
