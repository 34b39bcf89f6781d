package orchestrator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TestLapsedUsed: what a lapsed activation spent, from its run's record
// as the registry's claims left it.
func TestLapsedUsed(t *testing.T) {
	now := time.UnixMilli(10_000_000)
	rec := func(status thread.Status, spend float64, extra map[string]string) *registry.Record {
		return &registry.Record{Status: status, Cost: thread.Cost{Spend: spend}, Extra: extra}
	}
	recent := now.Add(-time.Second).UnixMilli()
	old := now.Add(-2 * time.Minute).UnixMilli()
	for _, c := range []struct {
		name  string
		rec   *registry.Record
		idle  bool
		lapse admission.Lapse
		used  int64
		ok    bool
	}{
		{"the last claim, the run ended", rec(thread.StatusCancelled, 0.05, map[string]string{"allow_act": "r", "allow_from": "10000000"}), false,
			admission.Lapse{Act: "r", AtMs: recent}, 40_000_000, true},
		{"the last claim, its lease still held", rec(thread.StatusRunning, 0.05, map[string]string{"allow_act": "r", "allow_from": "10000000"}), false,
			admission.Lapse{Act: "r", AtMs: recent}, -1, false},
		{"the last claim, its lease gone, not claimed again", rec(thread.StatusRunning, 0.05, map[string]string{"allow_act": "r", "allow_from": "10000000"}), true,
			admission.Lapse{Act: "r", AtMs: recent}, 40_000_000, true},
		{"a later claim counted it", rec(thread.StatusRunning, 0.05, map[string]string{"allow_act": "r@recover-5", "allow_prev": "r@recover-3=7;r=9"}), false,
			admission.Lapse{Act: "r", AtMs: recent}, 9, true},
		{"the same id lapsed twice: the older lapse is the oldest claim", rec(thread.StatusRunning, 0.05, map[string]string{"allow_act": "s", "allow_prev": "r=7;r=9"}), false,
			admission.Lapse{Act: "r#123", AtMs: recent}, 9, true},
		{"the same id lapsed twice: the newer one", rec(thread.StatusRunning, 0.05, map[string]string{"allow_act": "s", "allow_prev": "r=7;r=9"}), false,
			admission.Lapse{Act: "r", AtMs: recent}, 7, true},
		{"never claimed, a minute on", rec(thread.StatusRunning, 0.05, map[string]string{"allow_act": "s", "allow_prev": "q=1"}), false,
			admission.Lapse{Act: "r", AtMs: old}, 0, true},
		{"never claimed, too soon to tell", rec(thread.StatusRunning, 0.05, map[string]string{"allow_act": "s"}), false,
			admission.Lapse{Act: "r", AtMs: recent}, -1, false},
		{"forgotten: all of it, after an hour", rec(thread.StatusRunning, 0.05, map[string]string{"allow_act": "s", "allow_prev": "1=0;2=0;3=0;4=0;5=0;6=0;7=0;8=0"}), false,
			admission.Lapse{Act: "r", AtMs: now.Add(-2 * time.Hour).UnixMilli()}, -1, true},
		{"forgotten, within the hour", rec(thread.StatusRunning, 0.05, map[string]string{"allow_act": "s", "allow_prev": "1=0;2=0;3=0;4=0;5=0;6=0;7=0;8=0"}), false,
			admission.Lapse{Act: "r", AtMs: old}, -1, false},
	} {
		used, ok := lapsedUsed(c.rec, c.idle, c.lapse, now)
		require.Equal(t, []any{c.used, c.ok}, []any{used, ok}, c.name)
	}
}
