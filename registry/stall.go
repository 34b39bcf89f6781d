package registry

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spool-run/spool/internal/redisfn"
)

// StalledField is the thread hash field of Record.Stalled.
const StalledField = "stalled"

// StalledOnStorage is Stall.On for a thread whose worker waits for the
// blob store (an outage it rides out for --storage-patience).
const StalledOnStorage = "storage"

// Stall is what a running thread is stuck on, and since when.
type Stall struct {
	On    string    `json:"on"` // StalledOnStorage
	Since time.Time `json:"since"`
	// Op is the operation that fails (put, get, list, ...) and Error its
	// last failure.
	Op    string `json:"op,omitempty"`
	Error string `json:"error,omitempty"`
}

// markStalledScript records a stall on a thread that is not finished
// (mark_stalled.lua).
var markStalledScript = redisfn.New("mark_stalled", "", markStalledLua)

//go:embed mark_stalled.lua
var markStalledLua string

// MarkStalled records on thread id's record that it is stuck (Stall),
// for `thread show` and the monitor; nothing when the thread is gone or
// finished. It changes no version: a stall is no state of the thread.
func (a *Activations) MarkStalled(ctx context.Context, id string, s Stall) error {
	raw, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := markStalledScript.Run(ctx, a.rdb, []string{a.ks.Thread(id)}, string(raw)).Err(); err != nil {
		return fmt.Errorf("mark %s stalled: %w", id, err)
	}
	return nil
}

// ClearStalled forgets thread id's stall: what it was stuck on answers
// again.
func (a *Activations) ClearStalled(ctx context.Context, id string) error {
	if err := a.rdb.HDel(ctx, a.ks.Thread(id), StalledField).Err(); err != nil {
		return fmt.Errorf("clear the stall of %s: %w", id, err)
	}
	return nil
}

// Line says the stall in one line, as of now: "on storage for 23s (put:
// connection refused)".
func (s *Stall) Line(now time.Time) string {
	line := fmt.Sprintf("on %s for %s", s.On, now.Sub(s.Since).Round(time.Second))
	switch {
	case s.Op != "" && s.Error != "":
		line += fmt.Sprintf(" (%s: %s)", s.Op, s.Error)
	case s.Error != "":
		line += fmt.Sprintf(" (%s)", s.Error)
	}
	return line
}
