package monitor

import (
	"context"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spool-run/spool/orchestrator"
)

// collector computes its metrics on scrape: spool's threads by status
// (reused for CountsTTL) and asynq's queue sizes (QueueCollector).
type collector struct {
	m      *Monitor
	queues *QueueCollector

	threads, up *prometheus.Desc
}

func newCollector(m *Monitor) *collector {
	return &collector{
		m:       m,
		queues:  newQueueCollector(m.inspector, m.cfg.Orch, m.cfg.Logger),
		threads: prometheus.NewDesc("spool_threads", "Registered threads by status.", []string{"status"}, nil),
		up:      prometheus.NewDesc("spool_monitor_scrape_ok", "1 when the last scrape read Redis without error.", []string{"part"}, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.threads
	ch <- c.up
	c.queues.Describe(ch)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok := 1.0
	if counts, err := c.m.countThreads(ctx); err != nil {
		c.m.cfg.Logger.Warn("monitor: metrics: count threads", "error", err)
		ok = 0
	} else {
		for _, s := range Statuses {
			ch <- prometheus.MustNewConstMetric(c.threads, prometheus.GaugeValue, float64(counts.By[s]), string(s))
		}
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, ok, "threads")
	ok = 1
	if !c.queues.collect(ch) {
		ok = 0
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, ok, "queues")
}

// QueueCollector exports asynq's queue metrics for the spool queues of one
// namespace, read through asynq's Inspector on each scrape:
// asynq_queue_tasks{queue,state}, asynq_queue_latency_seconds{queue} and
// asynq_queue_paused{queue}, the queue label being the spool queue name.
// The monitor, the worker and the scheduler all serve it on /metrics.
type QueueCollector struct {
	inspector *asynq.Inspector
	keys      queueNames
	log       *slog.Logger

	queueTasks, queueLatency, queuePaused *prometheus.Desc
}

// NewQueueCollector returns a QueueCollector over orch's Redis and
// namespace.
func NewQueueCollector(orch *orchestrator.Orchestrator) *QueueCollector {
	return newQueueCollector(orch.Inspector(), orch, orch.Logger())
}

// queueNames names the spool queue of an asynq queue in a namespace
// (*orchestrator.Orchestrator does).
type queueNames interface {
	QueueName(aq string) (string, bool)
}

func newQueueCollector(in *asynq.Inspector, ks queueNames, log *slog.Logger) *QueueCollector {
	return &QueueCollector{
		inspector:    in,
		keys:         ks,
		log:          log,
		queueTasks:   prometheus.NewDesc("asynq_queue_tasks", "Tasks in an asynq queue by state.", []string{"queue", "state"}, nil),
		queueLatency: prometheus.NewDesc("asynq_queue_latency_seconds", "Age of the oldest pending task of a queue.", []string{"queue"}, nil),
		queuePaused:  prometheus.NewDesc("asynq_queue_paused", "1 when the queue is paused.", []string{"queue"}, nil),
	}
}

// Describe sends the descriptions of the three queue metrics
// (prometheus.Collector).
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.queueTasks
	ch <- c.queueLatency
	ch <- c.queuePaused
}

// Collect reads every spool queue through the Inspector and sends its
// metrics (prometheus.Collector); a queue that cannot be read is logged
// and left out.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

// collect sends the metrics and reports whether every read succeeded.
func (c *QueueCollector) collect(ch chan<- prometheus.Metric) bool {
	ok := true
	queues, err := c.inspector.Queues()
	if err != nil {
		c.log.Warn("metrics: list queues", "error", err)
		ok = false
	}
	// A spool queue's lanes (keyspace.Space.Lanes) add up to one series.
	type sum struct {
		tasks   map[string]int
		latency float64
		paused  bool
	}
	sums := map[string]*sum{}
	var names []string
	for _, q := range queues {
		name, mine := c.keys.QueueName(q)
		if !mine {
			continue
		}
		info, err := c.inspector.GetQueueInfo(q)
		if err != nil {
			c.log.Warn("metrics: queue info", "queue", q, "error", err)
			ok = false
			continue
		}
		s := sums[name]
		if s == nil {
			s = &sum{tasks: map[string]int{}}
			sums[name] = s
			names = append(names, name)
		}
		for state, n := range map[string]int{"pending": info.Pending, "active": info.Active, "scheduled": info.Scheduled,
			"retry": info.Retry, "archived": info.Archived, "completed": info.Completed, "aggregating": info.Aggregating} {
			s.tasks[state] += n
		}
		s.latency = max(s.latency, info.Latency.Seconds())
		s.paused = s.paused || info.Paused
	}
	for _, name := range names {
		s := sums[name]
		for state, n := range s.tasks {
			ch <- prometheus.MustNewConstMetric(c.queueTasks, prometheus.GaugeValue, float64(n), name, state)
		}
		ch <- prometheus.MustNewConstMetric(c.queueLatency, prometheus.GaugeValue, s.latency, name)
		paused := 0.0
		if s.paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(c.queuePaused, prometheus.GaugeValue, paused, name)
	}
	return ok
}
