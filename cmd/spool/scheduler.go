package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/scheduler"
	"github.com/spool-run/spool/thread"
)

func schedulerFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "schedules", EnvVars: []string{"SPOOL_SCHEDULES"}, Usage: "schedules file (default: <project>/" + scheduler.SchedulesPath + ")"},
		metricsAddrFlag("", ":9091"),
		&cli.DurationFlag{Name: "housekeeping-interval", EnvVars: []string{"SPOOL_HOUSEKEEPING_INTERVAL"}, Value: 30 * time.Second,
			Usage: "how often to recover orphaned threads and apply retention (0 disables)"},
		&cli.DurationFlag{Name: "retention", EnvVars: []string{"SPOOL_RETENTION"},
			Usage: "delete the stored artifacts of threads finished longer ago than this, e.g. 720h (0 keeps them forever)"},
		&cli.DurationFlag{Name: "record-retention", EnvVars: []string{"SPOOL_RECORD_RETENTION"},
			Usage: "delete the Redis records of whole trees of threads finished longer ago than this, once --retention deleted their artifacts, e.g. 2160h; at least --retention (0 keeps them forever)"},
		&cli.DurationFlag{Name: "reconcile-interval", EnvVars: []string{"SPOOL_RECONCILE_INTERVAL"}, Value: 10 * time.Minute,
			Usage: "how often to hold every unfinished thread's registry record and ledger charges to its transcript when no lost Redis writes were detected (0: only after a detected loss)"},
	}
}

func schedulerCommand() *cli.Command {
	return &cli.Command{
		Name:  "scheduler",
		Usage: "cron entries from .ai/config/schedules.yaml; housekeeping",
		Description: "Starts the directives of " + scheduler.SchedulesPath + " on their cron schedules and keeps house:\n" +
			"re-enqueues orphaned threads, reconciles the registry and the ledger with the signed transcripts when Redis\n" +
			"lost writes (a restart, a failover; and every --reconcile-interval) and, with --retention, deletes the\n" +
			"artifacts of old finished threads (with --record-retention, later, their Redis records too).\n" +
			"Any number of schedulers may run against one Redis: each tick starts exactly one thread.",
		Flags: schedulerFlags(),
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			if _, err := schedulerIntervals(c); err != nil {
				return err
			}
			return runService(c, func(s *services, reg *prometheus.Registry) (service, string, error) {
				sch, desc, err := newScheduler(c, s, reg)
				return sch, "spool scheduler: " + desc, err
			})
		},
	}
}

// intervals are a scheduler's durations as its flags set them.
type intervals struct {
	housekeeping       time.Duration // -1: off
	retention, records time.Duration
}

// schedulerIntervals checks --housekeeping-interval (0 becomes -1: off),
// --retention and --record-retention; it needs no connection, so that bad
// usage is reported before connecting.
func schedulerIntervals(c *cli.Context) (iv intervals, err error) {
	iv.housekeeping = c.Duration("housekeeping-interval")
	if iv.housekeeping < 0 {
		return iv, usagef("--housekeeping-interval %s: must not be negative", iv.housekeeping)
	}
	if iv.housekeeping == 0 {
		iv.housekeeping = -1
	}
	iv.retention = c.Duration("retention")
	if iv.retention < 0 {
		return iv, usagef("--retention %s: must not be negative", iv.retention)
	}
	iv.records = c.Duration("record-retention")
	switch {
	case iv.records < 0:
		return iv, usagef("--record-retention %s: must not be negative", iv.records)
	case iv.records > 0 && iv.retention == 0:
		return iv, usagef("--record-retention needs --retention: records go after the artifacts they name")
	case iv.records > 0 && iv.records < iv.retention:
		return iv, usagef("--record-retention %s: must be at least --retention (%s)", iv.records, iv.retention)
	}
	if ri := c.Duration("reconcile-interval"); ri < 0 {
		return iv, usagef("--reconcile-interval %s: must not be negative", ri)
	}
	return iv, nil
}

// newScheduler loads the schedules and checks them against the project,
// and returns the scheduler with a one-line description of what it runs.
func newScheduler(c *cli.Context, s *services, reg prometheus.Registerer) (*scheduler.Scheduler, string, error) {
	iv, err := schedulerIntervals(c)
	if err != nil {
		return nil, "", err
	}
	hk, ret := iv.housekeeping, iv.retention
	path := c.String("schedules")
	explicit := path != ""
	if !explicit {
		path = filepath.Join(s.project, scheduler.SchedulesPath)
	}
	entries, err := scheduler.LoadFile(path)
	if err != nil {
		switch {
		case !errors.Is(err, fs.ErrNotExist):
			return nil, "", err
		case explicit:
			return nil, "", fmt.Errorf("schedules file %s does not exist", path)
		default:
			entries = nil
		}
	}
	var m *scheduler.Metrics
	if reg != nil {
		m = scheduler.NewMetrics(reg)
	}
	ri := c.Duration("reconcile-interval")
	if ri == 0 {
		ri = -1 // off: only a detected loss of Redis writes is reconciled
	}
	sch, err := scheduler.New(scheduler.Config{Redis: s.rdb, Entries: entries, Project: s.project, HousekeepingInterval: hk, Retention: ret,
		RecordRetention: iv.records, ReconcileInterval: ri, CleanStop: cleanStopOf(s), Logger: s.log, Metrics: m}, s.orch)
	if err != nil {
		return nil, "", err
	}
	if err := sch.Check(c.Context); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	desc := fmt.Sprintf("%s from %s", thread.Count(len(entries), "schedule entry", "schedule entries"), path)
	if len(entries) == 0 {
		desc = "no schedule entries (" + path + " not found or empty)"
	}
	if hk > 0 {
		desc += fmt.Sprintf("; housekeeping every %s", hk)
	} else {
		desc += "; housekeeping off"
	}
	if ret > 0 {
		desc += fmt.Sprintf(", retention %s", ret)
		if iv.records > 0 {
			desc += fmt.Sprintf(" (records %s)", iv.records)
		}
	} else {
		desc += ", retention off"
	}
	return sch, desc, nil
}
