package orchestrator

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"time"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/registry"
)

// Checkpoint is what a running thread's checkpoint commits in Redis,
// beside the change (Orchestrator.Checkpoint).
type Checkpoint struct {
	// Charge is the turn's spend, charged with the commit; nil: none.
	// Charge.Done is not called: the outcome is in Checkpointed.
	Charge *Charge
	// Lease is the token of the activation lease the caller holds,
	// renewed for LeaseTTL with the commit; "": the lease is left alone.
	Lease    string
	LeaseTTL time.Duration
}

// Checkpointed is what a checkpoint's commit did and read.
type Checkpointed struct {
	Version int64
	// Charged is the charge's outcome, and ChargeErr its error: a
	// spend_exceeded *thread.LimitError when it was clamped, a ledger
	// refusal (ledger.RefusalError) when it was refused. The commit
	// stands either way.
	Charged   ledger.Charged
	ChargeErr error
	// LeaseHeld is false when a lease was given and another token holds
	// it (or none does): it was not renewed.
	LeaseHeld bool
}

// Checkpoint commits ch to a running thread held at version, as a turn's
// checkpoint does before it writes its segment, and in the same atomic
// step (checkpoint.lua: one round trip) charges the turn and renews the
// caller's lease. A stale version is a registry *ConflictError and nothing
// changes: the version is the fence of the activation that holds the
// thread, so a stale activation neither commits nor charges.
func (rt *Runtime) Checkpoint(ctx context.Context, rec *registry.Record, version int64, ch registry.Changes, cp Checkpoint) (Checkpointed, error) {
	commitKeys, commitArgs, err := rt.reg.CommitArgs(rec.ThreadID, version, ch)
	if err != nil {
		return Checkpointed{}, err
	}
	entry, path := rec.LedgerID(), rec.BudgetPath()
	var (
		lkeys []string // the ledger path's, with a charge
		lids  []any
	)
	chargeKey, chargeNano := "", int64(0)
	if c := cp.Charge; c != nil {
		if chargeNano, err = ledger.ToNano(c.Amount); err != nil {
			return Checkpointed{}, fmt.Errorf("charge %s: %w", entry, err)
		}
		if chargeKey = c.Key; chargeKey == "" {
			return Checkpointed{}, fmt.Errorf("charge %s: empty idempotency key", entry)
		}
		if lkeys, lids, err = rt.ledger.PathArgs(entry, path); err != nil {
			return Checkpointed{}, fmt.Errorf("charge %s: %w", entry, err)
		}
	}
	// registry.commit's keys but its outbox (a checkpoint ends no run),
	// which goes last, for a budget threshold the charge crosses.
	keys := slices.Concat(commitKeys[:3], []string{rt.keys.Lease(rec.ThreadID)}, lkeys, commitKeys[3:])
	args := slices.Concat([]any{len(lkeys), chargeKey, chargeNano, cp.Lease, cp.LeaseTTL.Milliseconds()}, lids, commitArgs)
	script := checkpointScript
	if cp.Charge == nil {
		script = checkpointFenceScript
	}
	res, err := script.Run(ctx, rt.fast, keys, args...).Slice()
	if err != nil {
		if rerr := registry.RefusalError(rec.ThreadID, version, err); rerr != nil {
			return Checkpointed{}, rerr
		}
		return Checkpointed{}, fmt.Errorf("checkpoint %s: %w", rec.ThreadID, err)
	}
	if len(res) != 4 {
		return Checkpointed{}, reply.Unexpected("checkpoint", res)
	}
	out := Checkpointed{Version: reply.Int(res[0]), LeaseHeld: reply.Int(res[3]) == 1}
	if c := cp.Charge; c != nil {
		if refused := reply.Returned(reply.String(res[2])); refused != nil {
			out.ChargeErr = ledger.RefusalError("charge", entry, path, c.Amount, refused)
			if out.ChargeErr == nil {
				out.ChargeErr = fmt.Errorf("charge %s: %w", entry, refused)
			}
		} else {
			out.Charged, out.ChargeErr = ledger.ReadCharged(entry, res[1])
		}
	}
	return out, nil
}

// checkpointScript is checkpoint.lua after the Lua functions it calls,
// as a Redis Function (package redisfn), whose library defines them once
// per server; where scripts run by EVALSHA (no Functions), each call
// defines them again, and checkpointFenceScript, the same without
// ledger.lua for a checkpoint without a charge (whose ledger step does
// not run), spares Redis ledger.lua's definitions, as much work as four
// commands (BENCHMARKS.md, issue 20).
var (
	checkpointScript      = redisfn.New("checkpoint", registry.Lua+ledger.Lua, checkpointLua)
	checkpointFenceScript = redisfn.New("checkpoint_fence", registry.Lua, checkpointLua)
)

//go:embed checkpoint.lua
var checkpointLua string
