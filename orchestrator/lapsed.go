package orchestrator

import (
	"context"
	"errors"
	"strconv"
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
	allowActField      = "allow_act"
	allowFromField     = "allow_from"
	allowPrevField     = "allow_prev"
	allowPrevUsedField = "allow_prev_used"
)

// lapsedPerTenant bounds the lapsed allowances one pass looks at per
// tenant; lapsedUnknownAfter is how long an allowance whose use the run's
// record cannot tell stays held before it is settled as all spent.
const (
	lapsedPerTenant    = 100
	lapsedUnknownAfter = time.Hour
)

// settleLapsed settles the allowances of reaped activations whose use
// their run's record tells (9.2 step 4): the release of the run's next
// activation does it at that activation's end, this pass as soon as the
// record knows. A lapsed activation is settled with the thread's spend
// since its claim when it was the run's last admitted claim and the run
// has not run since (waiting or ended), with what the next claim counted
// when another claimed after it, as all spent when its run is gone or an
// hour passed without the record telling. It returns how many it
// settled.
func (o *Orchestrator) settleLapsed(ctx context.Context) (int, error) {
	if o.adm.Policy() == nil {
		return 0, nil
	}
	tenants, err := o.adm.KnownTenants(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range tenants {
		lapsed, err := o.adm.Lapsed(ctx, t, lapsedPerTenant)
		if err != nil {
			return n, err
		}
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
	}
	return n, nil
}

// lapsedUse is what lapsed activation l spent, as its run's record tells
// (nano; -1: unknown, its whole allowance), and whether it is time to
// settle it.
func (o *Orchestrator) lapsedUse(ctx context.Context, l admission.Lapse) (int64, bool, error) {
	rec, err := o.reg.Get(ctx, l.Run)
	if errors.Is(err, registry.ErrNotFound) {
		return -1, true, nil
	}
	if err != nil {
		return 0, false, err
	}
	field := func(k string) (int64, bool) {
		n, err := strconv.ParseInt(rec.Extra[k], 10, 64)
		return n, err == nil
	}
	switch {
	case rec.Extra[allowPrevField] == l.Act:
		if used, ok := field(allowPrevUsedField); ok {
			return used, true, nil
		}
	case rec.Extra[allowActField] == l.Act && rec.Status != thread.StatusRunning:
		from, ok := field(allowFromField)
		spend, err := ledger.ToNano(rec.Cost.Spend)
		if ok && err == nil {
			return max(spend-from, 0), true, nil
		}
	}
	age := o.Now().Sub(time.UnixMilli(l.AtMs))
	return -1, age >= lapsedUnknownAfter, nil
}
