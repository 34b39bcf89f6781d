package admission

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSpendWindowsTrimmed: the pump trims the spend windows older than
// 40 UTC days and 13 months, a bounded step per call, once a day; a
// window that still holds an allowance (a call that began in it and has
// not ended) stays until it is settled, and goes at the next day's trim.
func TestSpendWindowsTrimmed(t *testing.T) {
	t.Parallel()
	s := newSlot(t, true, ceilingConf(map[string]any{"spend_per_day": "10", "spend_grant": "0.10"}))
	s.prov = 10
	const dayMs = int64(86400000)
	day := func(at int64) string { d, _ := Windows(time.UnixMilli(at)); return "d:" + d }
	month := func(at int64) string { _, m := Windows(time.UnixMilli(at)); return "m:" + m }

	// A call that begins a second before midnight holds an allowance of
	// that day (and of its month) until it ends.
	late := t0 - t0%dayMs + dayMs - 1000
	st, _, _, _ := s.requestAt(late, "late", root("late"))
	require.Equal(t, "GRANTED", st)
	v, _ := s.claim(late, "late", root("late"), "tok", 100*dayMs, 16)
	require.Equal(t, "RUN", v)
	require.Equal(t, usd/10, s.entries()["late"].Allowance)

	// Two years of windows, each with what was spent in it; now is 50
	// days after the call began, which has not ended.
	now := late + 50*dayMs
	for i := int64(-50); i <= 700; i++ {
		for _, f := range []string{day(late-i*dayMs) + ":spent", day(late-i*dayMs) + ":overrun", month(late-i*dayMs) + ":spent"} {
			require.NoError(t, s.rdb.HSet(s.ctx, s.keys[11], f, "7").Err())
		}
	}
	seeded := s.hash(11)
	require.Equal(t, fmt.Sprint(usd/10), seeded[day(late)+":held"])
	y, m, _ := time.UnixMilli(now).UTC().Date()
	oldDay, oldMonth := day(now-40*dayMs), "m:"+time.Date(y, m-13, 1, 0, 0, 0, 0, time.UTC).Format("2006-01")
	kept := func(f string) bool {
		w := f[:strings.LastIndex(f, ":")]
		return w == day(late) || strings.HasPrefix(w, "d:") && w >= oldDay || strings.HasPrefix(w, "m:") && w >= oldMonth
	}

	// The trim walks the hash a step per pump until the day's walk ends.
	trim := func(now int64) (steps int) {
		for s.state()["spend_trim"] != day(now) {
			s.pump(now, 10, 16)
			steps++
			require.Less(t, steps, 200, "the walk never ended")
		}
		return steps
	}
	steps := trim(now)
	require.Greater(t, steps, 1, "%d fields in one step: a call's work is not bounded", len(seeded))
	t.Logf("the walk of %d fields took %d pumps", len(seeded), steps)
	got := s.hash(11)
	for f, v := range seeded {
		if kept(f) {
			require.Equal(t, v, got[f], "%s: a window of the last 40 days or 13 months, or one holding an allowance, stays", f)
		} else {
			require.NotContains(t, got, f, "an old window stayed")
		}
	}
	require.Len(t, got, 41*2+14+1+3, "41 days (spent, overrun), 14 months and its month's held, the held day's three")

	// The call ends: it settles in the day it began, which the next
	// day's trim then removes.
	s.end(now+1, "late", "tok", usd/20, "")
	got = s.hash(11)
	require.Equal(t, []string{"0", fmt.Sprint(7 + usd/20)}, []string{got[day(late)+":held"], got[day(late)+":spent"]})
	s.pump(now+2, 10, 16)
	require.Contains(t, s.hash(11), day(late)+":spent", "one walk a day")
	trim(now + dayMs)
	got = s.hash(11)
	require.NotContains(t, got, day(late)+":spent")
	require.NotContains(t, got, day(late)+":held")
	require.NotContains(t, got, oldDay+":spent", "41 days old by then")
	require.Contains(t, got, day(now)+":spent")
}
