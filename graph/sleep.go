package graph

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// A sleep node (spec 4.7) waits for a time: `for` a duration from when its
// step starts, or `until` a point in time. Either may be written literally,
// which validation checks, or as ${...}, which its step resolves when it
// starts. A duration is a Go duration that may also count days ("15m",
// "1h30m", "2d", "1d12h") or a number of seconds; 0 continues at once. A
// time is RFC 3339 ("2026-03-01T09:00:00Z", "...+02:00"), read as UTC when
// it has no offset ("2026-03-01T09:00:00", "2026-03-01 09:00:00", or a
// date, its midnight); a time already past continues at once.

// CodeInvalidSleep is the step failure of a sleep whose for or until
// resolved, at run time, to something that is not a duration or a time.
const CodeInvalidSleep = "invalid_sleep"

// ParseSleepFor reads a sleep's `for`: a duration, days allowed, or a
// number of seconds; never negative.
func ParseSleepFor(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	bad := fmt.Errorf("%q is not a duration (write 30s, 15m, 2h, 1d or a number of seconds)", s)
	if s == "" {
		return 0, bad
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return sleepSeconds(f*float64(time.Second), s)
	}
	days, rest := 0.0, s
	if before, after, ok := strings.Cut(s, "d"); ok {
		f, err := strconv.ParseFloat(before, 64)
		if err != nil || strings.HasPrefix(before, "+") || strings.HasPrefix(before, "-") {
			return 0, bad
		}
		days, rest = f, after
	}
	var d time.Duration
	if rest != "" {
		var err error
		if d, err = time.ParseDuration(rest); err != nil || strings.HasPrefix(rest, "+") {
			return 0, bad
		}
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative: a sleep waits 0 or more", s)
	}
	return sleepSeconds(days*float64(24*time.Hour)+float64(d), s)
}

// sleepSeconds is ns nanoseconds as a duration, refused when negative or
// too long to count.
func sleepSeconds(ns float64, s string) (time.Duration, error) {
	switch {
	case math.IsNaN(ns) || ns < 0:
		return 0, fmt.Errorf("%q is negative: a sleep waits 0 or more", s)
	case ns >= math.MaxInt64:
		return 0, fmt.Errorf("%q is too long a sleep", s)
	}
	return time.Duration(ns), nil
}

// sleepLayouts are the times ParseSleepUntil reads without an offset, as
// UTC.
var sleepLayouts = []string{"2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", "2006-01-02T15:04", "2006-01-02"}

// ParseSleepUntil reads a sleep's `until`: an RFC 3339 time, UTC when it
// has no offset.
func ParseSleepUntil(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	for _, l := range sleepLayouts {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (write 2026-03-01T09:00:00Z, or with an offset such as +02:00)", s)
}

// SleepWake is when a sleep step of node n that starts at now wakes, its
// for or until interpolated in scope: never before now. A value that is
// neither a duration nor a time fails with CodeInvalidSleep.
func SleepWake(n *Node, scope map[string]any, now time.Time) (time.Time, error) {
	key, text := "for", n.For
	if n.Until != "" {
		key, text = "until", n.Until
	}
	s, err := String(text, scope)
	if err != nil {
		return time.Time{}, err
	}
	if key == "for" {
		d, err := ParseSleepFor(s)
		if err != nil {
			return time.Time{}, &StepError{Code: CodeInvalidSleep, Message: fmt.Sprintf("sleep %s: for: %v", n.Name, err)}
		}
		return now.Add(d), nil
	}
	t, err := ParseSleepUntil(s)
	if err != nil {
		return time.Time{}, &StepError{Code: CodeInvalidSleep, Message: fmt.Sprintf("sleep %s: until: %v", n.Name, err)}
	}
	if t.Before(now) {
		return now, nil
	}
	return t, nil
}

// sleep checks a sleep node: exactly one of for and until, each a
// duration or a time when written literally, or expressions read before
// there is a result.
func (v *validator) sleep(n *Node) {
	name := n.Name
	switch {
	case n.For == "" && n.Until == "":
		v.errorf(name, "for", "missing: a sleep node needs for (a duration such as 15m) or until (a time such as 2026-03-01T09:00:00Z)")
		return
	case n.For != "" && n.Until != "":
		v.errorf(name, "until", "a sleep node takes for or until, not both")
		return
	}
	key, text, check := "for", n.For, func(s string) error { _, err := ParseSleepFor(s); return err }
	if n.Until != "" {
		key, text, check = "until", n.Until, func(s string) error { _, err := ParseSleepUntil(s); return err }
	}
	if strings.Contains(text, "${") {
		v.exprs(name, key, text, wherePre, nil)
		return
	}
	if err := check(text); err != nil {
		v.errorf(name, key, "%v", err)
	}
}
