package registry

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/spooltype"
)

// StalledField is the thread hash field of Record.Stalled.
const StalledField = "stalled"

// StalledOnStorage is Stall.On for a thread whose worker waits for the
// blob store (an outage it rides out for --storage-patience).
const StalledOnStorage = "storage"

// Stall is what a running thread is stuck on, and since when
// (spooltype.Stall).
type Stall = spooltype.Stall

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
