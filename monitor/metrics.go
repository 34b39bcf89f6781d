package monitor

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spool-run/spool/keyspace"
)

// collector computes its metrics on scrape: asynq's queue sizes through
// the Inspector, and spool's threads by status (reused for CountsTTL).
type collector struct {
	m *Monitor

	threads, queueTasks, queueLatency, queuePaused, up *prometheus.Desc
}

func newCollector(m *Monitor) *collector {
	return &collector{
		m:            m,
		threads:      prometheus.NewDesc("spool_threads", "Registered threads by status.", []string{"status"}, nil),
		queueTasks:   prometheus.NewDesc("asynq_queue_tasks", "Tasks in an asynq queue by state.", []string{"queue", "state"}, nil),
		queueLatency: prometheus.NewDesc("asynq_queue_latency_seconds", "Age of the oldest pending task of a queue.", []string{"queue"}, nil),
		queuePaused:  prometheus.NewDesc("asynq_queue_paused", "1 when the queue is paused.", []string{"queue"}, nil),
		up:           prometheus.NewDesc("spool_monitor_scrape_ok", "1 when the last scrape read Redis without error.", []string{"part"}, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.threads
	ch <- c.queueTasks
	ch <- c.queueLatency
	ch <- c.queuePaused
	ch <- c.up
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
	queues, err := c.m.inspector.Queues()
	if err != nil {
		c.m.cfg.Logger.Warn("monitor: metrics: list queues", "error", err)
		ok = 0
	}
	for _, q := range queues {
		name, mine := spoolQueue(c.m.cfg.Orch.Keys, q)
		if !mine {
			continue
		}
		info, err := c.m.inspector.GetQueueInfo(q)
		if err != nil {
			c.m.cfg.Logger.Warn("monitor: metrics: queue info", "queue", q, "error", err)
			ok = 0
			continue
		}
		for state, n := range map[string]int{"pending": info.Pending, "active": info.Active, "scheduled": info.Scheduled,
			"retry": info.Retry, "archived": info.Archived, "completed": info.Completed, "aggregating": info.Aggregating} {
			ch <- prometheus.MustNewConstMetric(c.queueTasks, prometheus.GaugeValue, float64(n), name, state)
		}
		ch <- prometheus.MustNewConstMetric(c.queueLatency, prometheus.GaugeValue, info.Latency.Seconds(), name)
		paused := 0.0
		if info.Paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(c.queuePaused, prometheus.GaugeValue, paused, name)
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, ok, "queues")
}

// spoolQueue maps an asynq queue name back to the spool queue of ks (see
// keyspace.Space.Queue): in a named namespace the queues are
// "<namespace>.<name>"; in the default namespace they carry no dot, which
// tells them from other namespaces' queues on the same Redis.
func spoolQueue(ks keyspace.Space, asynqName string) (string, bool) {
	if ks.Namespace() == keyspace.DefaultNamespace {
		return asynqName, !strings.Contains(asynqName, ".")
	}
	return strings.CutPrefix(asynqName, ks.Namespace()+".")
}
