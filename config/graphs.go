package config

import (
	"fmt"
	"io/fs"
	"time"
)

// GraphsPath is where a project tunes its graph runs.
const GraphsPath = ".ai/config/agent/graphs.yaml"

// Graphs is graphs.yaml: the bounds and cadence of graph runs (package
// graph), each field's default in its comment:
//
//	graph:
//	  max_state_bytes: 1048576        # a run's state, canonical JSON (hard cap 8 MiB)
//	  max_event_result_bytes: 65536   # a step's result kept in its event
//	  max_foreach_items: 1000         # a foreach's max_items when it sets none
//	  segment_steps: 50               # steps an activation runs before handing the run back
//	  segment_seconds: 60             # seconds an activation runs before handing it back
//	  hold_seconds: 5                 # seconds a run waits in its activation for a child to end before it suspends (0: at once)
//
// An unknown key or a value out of range is an error naming the file.
type Graphs struct {
	MaxStateBytes       int `yaml:"max_state_bytes"`
	MaxEventResultBytes int `yaml:"max_event_result_bytes"`
	MaxForeachItems     int `yaml:"max_foreach_items"`
	SegmentSteps        int `yaml:"segment_steps"`
	SegmentSeconds      int `yaml:"segment_seconds"`
	// HoldSeconds is how long a run whose children are all running waits
	// in its activation, holding its worker slot, for one to end before
	// it suspends: a child that ends meanwhile is replaced at once, with
	// no wake task to queue and no checkpoint to load. nil is the
	// default; 0 suspends at once.
	HoldSeconds *int `yaml:"hold_seconds"`
}

// Graph run defaults and caps.
const (
	DefaultMaxStateBytes       = 1 << 20
	MaxStateBytesCap           = 8 << 20
	DefaultMaxEventResultBytes = 64 << 10
	DefaultMaxForeachItems     = 1000
	DefaultSegmentSteps        = 50
	DefaultSegmentSeconds      = 60
	DefaultHoldSeconds         = 5
)

// WithDefaults fills the unset fields.
func (g Graphs) WithDefaults() Graphs {
	if g.MaxStateBytes == 0 {
		g.MaxStateBytes = DefaultMaxStateBytes
	}
	if g.MaxEventResultBytes == 0 {
		g.MaxEventResultBytes = DefaultMaxEventResultBytes
	}
	if g.MaxForeachItems == 0 {
		g.MaxForeachItems = DefaultMaxForeachItems
	}
	if g.SegmentSteps == 0 {
		g.SegmentSteps = DefaultSegmentSteps
	}
	if g.SegmentSeconds == 0 {
		g.SegmentSeconds = DefaultSegmentSeconds
	}
	if g.HoldSeconds == nil {
		h := DefaultHoldSeconds
		g.HoldSeconds = &h
	}
	return g
}

// HoldTime is HoldSeconds as a duration.
func (g Graphs) HoldTime() time.Duration {
	if g.HoldSeconds == nil {
		return DefaultHoldSeconds * time.Second
	}
	return time.Duration(*g.HoldSeconds) * time.Second
}

// SegmentTime is SegmentSeconds as a duration.
func (g Graphs) SegmentTime() time.Duration { return time.Duration(g.SegmentSeconds) * time.Second }

// LoadGraphs reads graphs.yaml from a bundle; without one, the defaults.
func LoadGraphs(fsys fs.FS) (Graphs, error) {
	return load(fsys, Graphs{}.WithDefaults(), ParseGraphs, GraphsPath, ".ai/config/graphs.yaml")
}

// ParseGraphs parses graphs.yaml (the settings under its `graph:` key).
func ParseGraphs(p string, data []byte) (Graphs, error) {
	var doc struct {
		Graph Graphs `yaml:"graph"`
	}
	if err := decodeStrict(p, data, &doc); err != nil {
		return Graphs{}, err
	}
	g := doc.Graph
	for name, v := range map[string]int{"max_state_bytes": g.MaxStateBytes, "max_event_result_bytes": g.MaxEventResultBytes,
		"max_foreach_items": g.MaxForeachItems, "segment_steps": g.SegmentSteps, "segment_seconds": g.SegmentSeconds,
		"hold_seconds": int(g.HoldTime() / time.Second)} {
		if v < 0 {
			return Graphs{}, fmt.Errorf("%s: graph.%s %d is negative", p, name, v)
		}
	}
	if g.MaxStateBytes > MaxStateBytesCap {
		return Graphs{}, fmt.Errorf("%s: graph.max_state_bytes %d is over the cap of %d (8 MiB): keep big data in files and their paths in the state", p, g.MaxStateBytes, MaxStateBytesCap)
	}
	return g.WithDefaults(), nil
}
