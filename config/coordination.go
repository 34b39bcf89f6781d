package config

import (
	"fmt"
	"io/fs"
	"time"
)

// Transcript integrity modes.
const (
	IntegrityStrict  = "strict"
	IntegrityLenient = "lenient"
)

// Coordination is coordination.yaml.
type Coordination struct {
	// TriggerThreshold is the context usage ratio that triggers a handoff.
	// Default 0.9.
	TriggerThreshold float64
	// ResumeCeilingTokens bounds the trailing messages carried into a
	// continuation. Default 16000.
	ResumeCeilingTokens int
	// WaitDefaultTimeout is wait_threads' timeout when none is given.
	// Default 600 s.
	WaitDefaultTimeout time.Duration
	// WaitMaxThreads is how many thread ids one wait may name. Default 50.
	WaitMaxThreads int
	// TranscriptIntegrity is strict or lenient. Default strict.
	TranscriptIntegrity string
	// MaxContinuations caps a continuation chain's handoffs: a thread
	// that is already the chain's MaxContinuations-th continuation
	// (handoffs and resumes both count) and whose context fills ends in
	// error continuations_exceeded instead of handing off, so a runaway
	// chain of ever-full contexts stops. Default 20.
	MaxContinuations int
}

// DefaultCoordination is what a project without coordination.yaml gets.
func DefaultCoordination() Coordination {
	return Coordination{
		TriggerThreshold:    0.9,
		ResumeCeilingTokens: 16000,
		WaitDefaultTimeout:  600 * time.Second,
		WaitMaxThreads:      50,
		TranscriptIntegrity: IntegrityStrict,
		MaxContinuations:    20,
	}
}

// LoadCoordination reads coordination.yaml from the project fsys; a missing
// file gives DefaultCoordination.
func LoadCoordination(fsys fs.FS) (Coordination, error) {
	return load(fsys, DefaultCoordination(), ParseCoordination, agentPaths("coordination")...)
}

// ParseCoordination parses coordination.yaml. Keys accepted, at the top
// level or under "coordination:":
//
//	continuation.trigger_threshold | trigger_threshold
//	continuation.resume_ceiling_tokens | resume_ceiling_tokens
//	wait_threads.default_timeout (seconds) | wait_threads.max_threads
//	transcript_integrity | continuation.transcript_integrity (strict | lenient)
//	continuation.max_continuations | max_continuations
func ParseCoordination(path string, data []byte) (Coordination, error) {
	c := DefaultCoordination()
	root, err := parseTree(path, data, "coordination")
	if err != nil {
		return c, err
	}
	if err := root.read(
		number(&c.TriggerThreshold, func(f float64) bool { return f > 0 && f <= 1 }, "trigger_threshold: %g is not in (0, 1]",
			"continuation.trigger_threshold", "trigger_threshold"),
		integer(&c.ResumeCeilingTokens, positive, "resume_ceiling_tokens: %d is not positive",
			"continuation.resume_ceiling_tokens", "resume_ceiling_tokens"),
		seconds(&c.WaitDefaultTimeout, positive, "wait_threads.default_timeout: %g is not positive",
			"wait_threads.default_timeout", "default_timeout"),
		integer(&c.WaitMaxThreads, positive, "wait_threads.max_threads: %d is not positive",
			"wait_threads.max_threads", "wait_threads.max_thread_ids"),
		integer(&c.MaxContinuations, notNegative, "continuation.max_continuations: %d is negative",
			"continuation.max_continuations", "max_continuations"),
	); err != nil {
		return c, err
	}
	if s, ok, err := root.str("transcript_integrity", "continuation.transcript_integrity"); err != nil {
		return c, err
	} else if ok {
		if s != IntegrityStrict && s != IntegrityLenient {
			return c, fmt.Errorf("%s: transcript_integrity: %q is not strict or lenient", path, s)
		}
		c.TranscriptIntegrity = s
	}
	return c, nil
}
