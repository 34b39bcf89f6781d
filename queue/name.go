package queue

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
)

// MaxNameLen is the longest spool queue name.
const MaxNameLen = 128

// namePattern is what a spool queue name may be: a letter or digit, then
// letters, digits and : . _ - (no braces, which would break the hash tag
// asynq puts the name in; no ~, which separates a queue from its lanes;
// nothing a key, a path or a log line would misread).
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9:._-]*$`)

// ErrBadName means a queue name is not one.
var ErrBadName = errors.New("not a queue name")

// CheckName refuses (ErrBadName) a queue name no worker could serve: one
// that does not match namePattern or is longer than MaxNameLen. Every
// way a queue is named (thread run --queue, the API, spawns, schedules,
// worker --queues) is held to it before a thread is registered.
func CheckName(name string) error {
	if len(name) > MaxNameLen {
		return fmt.Errorf("queue name of %d bytes: at most %d: %w", len(name), MaxNameLen, ErrBadName)
	}
	if !namePattern.MatchString(name) {
		return fmt.Errorf("queue %s: letters, digits and : . _ - only, starting with a letter or digit: %w", quoteShort(name), ErrBadName)
	}
	return nil
}

// quoteShort quotes s for an error, cut to 40 bytes.
func quoteShort(s string) string {
	if len(s) > 40 {
		return strconv.Quote(s[:40]) + "..."
	}
	return strconv.Quote(s)
}
