package scheduler

import "github.com/prometheus/client_golang/prometheus"

// Tick outcomes, the "outcome" label of spool_scheduler_ticks_total.
const (
	// OutcomeStarted: this process took the tick and started its thread.
	OutcomeStarted = "started"
	// OutcomeTaken: another scheduler process took the tick.
	OutcomeTaken = "taken"
	// OutcomeMissed: the tick passed while this process could not act
	// (stopped, stalled, or later than MisfireGrace); no thread for it.
	OutcomeMissed = "missed"
	// OutcomeError: this process took the tick but could not start the
	// thread (the error is logged).
	OutcomeError = "error"
)

// Metrics are the scheduler's Prometheus collectors. A nil *Metrics
// records nothing.
type Metrics struct {
	Ticks            *prometheus.CounterVec
	ThreadsStarted   *prometheus.CounterVec
	HousekeepingRuns *prometheus.CounterVec
	Recoveries       *prometheus.CounterVec
	RetentionThreads prometheus.Counter
	RetentionObjects prometheus.Counter
	HousekeepingSecs prometheus.Histogram
	ScheduledEntries prometheus.Gauge
	// Reconciled counts what reconciliation repaired, by kind (requeue,
	// transcript_mark, version, charge); ReconcilePasses the
	// reconciliations run, by trigger.
	Reconciled      *prometheus.CounterVec
	ReconcilePasses *prometheus.CounterVec
}

// NewMetrics registers the scheduler's collectors with reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Ticks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_scheduler_ticks_total",
			Help: "Schedule ticks seen by this process, by entry and outcome (started, taken, missed, error)."}, []string{"entry", "outcome"}),
		ThreadsStarted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_scheduler_threads_started_total",
			Help: "Threads started by this scheduler process."}, []string{"entry", "directive"}),
		HousekeepingRuns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_scheduler_housekeeping_runs_total",
			Help: "Housekeeping passes by result (ok, error, skipped: another scheduler held the pass)."}, []string{"result"}),
		Recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_scheduler_housekeeping_recoveries_total",
			Help: "Threads re-enqueued by housekeeping: orphan (running, lease lapsed) or wake (stalled wait)."}, []string{"kind"}),
		RetentionThreads: prometheus.NewCounter(prometheus.CounterOpts{Name: "spool_scheduler_retention_threads_total",
			Help: "Finished threads whose persisted artifacts retention deleted."}),
		RetentionObjects: prometheus.NewCounter(prometheus.CounterOpts{Name: "spool_scheduler_retention_objects_deleted_total",
			Help: "Blob store objects deleted by retention."}),
		HousekeepingSecs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spool_scheduler_housekeeping_seconds",
			Help: "Duration of a housekeeping pass.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
		ScheduledEntries: prometheus.NewGauge(prometheus.GaugeOpts{Name: "spool_scheduler_entries",
			Help: "Schedule entries this process runs."}),
		Reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_reconciled_total",
			Help: "What reconciling the registry and ledger with the transcripts repaired: requeue (a created thread whose start task was lost), " +
				"transcript_mark, version, charge (a turn charge the ledger lost), restore (a thread the registry lost, restored from the store)."}, []string{"kind"}),
		ReconcilePasses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spool_reconcile_passes_total",
			Help: "Reconciliations run, by trigger: no_marker, redis_restarted, canary_lost (Redis may have lost writes), periodic."}, []string{"trigger"}),
	}
	if reg != nil {
		reg.MustRegister(m.Ticks, m.ThreadsStarted, m.HousekeepingRuns, m.Recoveries, m.RetentionThreads, m.RetentionObjects,
			m.HousekeepingSecs, m.ScheduledEntries, m.Reconciled, m.ReconcilePasses)
		for _, k := range []string{KindRequeue, KindMark, KindVersion, KindCharge, KindRestore, KindMessage} {
			m.Reconciled.WithLabelValues(k) // every kind shows, at 0 until it counts
		}
	}
	return m
}

func (m *Metrics) tick(entry, outcome string) {
	if m != nil {
		m.Ticks.WithLabelValues(entry, outcome).Inc()
	}
}

func (m *Metrics) started(entry, directive string) {
	if m != nil {
		m.ThreadsStarted.WithLabelValues(entry, directive).Inc()
	}
}

func (m *Metrics) housekeeping(r HousekeepingResult, err error, secs float64) {
	if m == nil {
		return
	}
	switch {
	case err != nil:
		m.HousekeepingRuns.WithLabelValues("error").Inc()
	case r.Skipped:
		m.HousekeepingRuns.WithLabelValues("skipped").Inc()
		return
	default:
		m.HousekeepingRuns.WithLabelValues("ok").Inc()
	}
	m.Recoveries.WithLabelValues("orphan").Add(float64(r.Orphans))
	m.Recoveries.WithLabelValues("wake").Add(float64(r.Wakes))
	m.RetentionThreads.Add(float64(r.Retained))
	m.RetentionObjects.Add(float64(r.Objects))
	m.HousekeepingSecs.Observe(secs)
}

func (m *Metrics) reconciled(r ReconcileResult) {
	if m == nil || r.Trigger == "" {
		return
	}
	m.ReconcilePasses.WithLabelValues(r.Trigger).Inc()
	m.Reconciled.WithLabelValues(KindRequeue).Add(float64(r.Requeued))
	m.Reconciled.WithLabelValues(KindMark).Add(float64(r.Marks))
	m.Reconciled.WithLabelValues(KindVersion).Add(float64(r.Versions))
	m.Reconciled.WithLabelValues(KindCharge).Add(float64(r.Charges))
	m.Reconciled.WithLabelValues(KindRestore).Add(float64(r.Restored))
	m.Reconciled.WithLabelValues(KindMessage).Add(float64(r.Messages))
}
