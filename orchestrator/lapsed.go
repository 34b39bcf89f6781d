package orchestrator

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// Thread hash fields (registry claim.lua) an admitted activation's
// claim writes: its admission id and the thread's spend then (nano),
// and the activation before it with what that one spent.
const (
	allowActField  = "allow_act"
	allowFromField = "allow_from"
	// allowPrevField lists the last admitted activations before
	// allow_act with what each spent, newest first: "<act>=<nano>;...".
	allowPrevField = "allow_prev"
)

// lapsedPerTenant bounds the lapsed allowances one pass looks at per
// tenant; lapsedUnknownAfter is how long an allowance whose use the run's
// record cannot tell stays held before it is settled as all spent.
// lapsedPrevKept is how many earlier claims allow_prev keeps (claim.lua);
// lapsedNeverClaimed is how long after its reap an activation no claim
// of its run names is taken for one that never ran.
const (
	lapsedPerTenant    = 100
	lapsedUnknownAfter = time.Hour
	lapsedPrevKept     = 8
	lapsedNeverClaimed = time.Minute
)

// settleLapsed settles the allowances of reaped activations whose use
// their run's record tells (9.2 step 4): the release of the run's next
// activation does it at that activation's end, this pass as soon as the
// record knows. A lapsed activation is settled with the thread's spend
// since its claim when it was the run's last admitted claim and the run
// has not run since (waiting, ended, or recovered and not claimed
// again: no lease held), with what a later claim counted
// when one claimed after it (allow_prev keeps eight), with nothing when
// no claim of its run names it a minute after (it never ran), and as all
// spent when its run is gone or an hour passed without the record
// telling. It returns how many it settled.
func (o *Orchestrator) settleLapsed(ctx context.Context) (int, error) {
	return o.eachTenant(ctx, func(_ *admission.Published, t string) (int, error) {
		return o.settleLapsedOf(ctx, t)
	})
}

// settleLapsedOf is settleLapsed of tenant t.
func (o *Orchestrator) settleLapsedOf(ctx context.Context, t string) (int, error) {
	lapsed, err := o.adm.Lapsed(ctx, t, lapsedPerTenant)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, l := range lapsed {
		used, known, err := o.lapsedUse(ctx, l)
		if err != nil {
			return n, err
		}
		if !known {
			continue
		}
		ok, err := o.adm.Settle(ctx, t, l.Act, used)
		if err != nil {
			return n, err
		}
		if ok {
			o.log.Info("lapsed allowance settled", "tenant", t, "activation", l.Act, "used_nano", used)
			n++
		}
	}
	return n, nil
}

// lapsedUse is what lapsed activation l spent, as its run's record tells
// (nano; -1: unknown, its whole allowance), and whether it is time to
// settle it.
func (o *Orchestrator) lapsedUse(ctx context.Context, l admission.Lapse) (int64, bool, error) {
	rec, leased, err := o.reg.GetLeased(ctx, l.Run)
	if errors.Is(err, registry.ErrNotFound) {
		return -1, true, nil
	}
	if err != nil {
		return 0, false, err
	}
	used, ok := lapsedUsed(rec, !leased, l, o.Now())
	return used, ok, nil
}

// lapsedUsed is lapsedUse of l from its run's record rec at time now;
// idle: no activation held the run's lease when rec was read. The last
// claim's activation is done when its run is not running, or when it is
// (recovered, not claimed again) and no lease is held: its grant was
// reaped after its lease lapsed, and a live worker stops an activation
// before its grant lapses, so no commit of it is still to come, and a
// claim after the read is the next activation's (allow_act moves on, or
// keeps the id of a redelivered task with its own lease). Settling it
// then rather than at the next activation's release gives the window
// back while the run waits for its grant: a worker killed with sixteen
// allowances of a binding window would otherwise hold the window for
// the length of sixteen runs.
// An activation id lapsed twice (asynq ran the same task again after its
// worker died, and that one died too) keeps the older lapse under
// "<act>#<ms>" (adm.lapse): it is the oldest of the claims that name the
// id.
func lapsedUsed(rec *registry.Record, idle bool, l admission.Lapse, now time.Time) (int64, bool) {
	act, _, older := strings.Cut(l.Act, "#")
	age := now.Sub(time.UnixMilli(l.AtMs))
	if rec.Extra[allowActField] == act && !older {
		from, ferr := strconv.ParseInt(rec.Extra[allowFromField], 10, 64)
		spend, err := ledger.ToNano(rec.Cost.Spend)
		if (rec.Status != thread.StatusRunning || idle) && ferr == nil && err == nil {
			return max(spend-from, 0), true
		}
		return -1, age >= lapsedUnknownAfter
	}
	prev := strings.Split(rec.Extra[allowPrevField], ";")
	found := false
	var used int64
	for _, e := range prev {
		a, n, ok := strings.Cut(e, "=")
		if !ok || a != act {
			continue
		}
		if u, err := strconv.ParseInt(n, 10, 64); err == nil {
			used, found = u, true
			if !older {
				break
			}
		}
	}
	if found {
		return used, true
	}
	if len(prev) < lapsedPrevKept && age >= lapsedNeverClaimed {
		// Neither the last claim nor one of those before it, with none
		// forgotten: its worker died between its grant's claim and the
		// registry's, and it ran nothing.
		return 0, true
	}
	return -1, age >= lapsedUnknownAfter
}
