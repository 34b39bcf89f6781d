package registry

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/thread"
)

// Fields of a thread whose activation admission parked (package
// admission): the activation's id, which the claim of that activation
// accepts and clears, and its tenant.
const (
	AdmActField    = "adm_act"
	AdmTenantField = "adm_tenant"
)

// parkScript notes a parked activation on its thread (park.lua).
var parkScript = redisfn.New("park", "", parkLua)

//go:embed park.lua
var parkLua string

// Park notes on thread id, at version, that admission parked its
// activation act (of tenant) waiting for reason: status waiting (created
// joins waiting so), waiting_for, and the activation, which its claim
// accepts (and clears, with waiting_for). A running thread is parked only
// when no activation holds it (no lease) and act is its recovery at
// version ("<id>@recover-<version>"): an activation that yielded its slot
// at a turn boundary (tenant_budget, its fair share) or handed back for a
// retry waits so, not running. It reports false, and changes nothing,
// when the thread moved on meanwhile (its version, or another status: a
// grant that was claimed already).
func (a *Activations) Park(ctx context.Context, id string, version int64, act, tenant, reason string) (bool, error) {
	n, err := parkScript.Run(ctx, a.rdb, []string{a.ks.Thread(id), a.ks.Events(id), a.ks.Lease(id)}, version, act, reason, tenant,
		a.now().UTC().Format(time.RFC3339Nano)).Int()
	if err != nil {
		return false, fmt.Errorf("park %s: %w", id, err)
	}
	return n == 1, nil
}

// Parked is a thread whose activation admission parked.
type Parked struct {
	ThreadID, Act, Tenant, WaitingFor string
	Version                           int64
}

// ParkedThreads lists the waiting threads whose activation admission
// parked (Park), for housekeeping to make sure each is still in its
// tenant's queues.
func (a *Activations) ParkedThreads(ctx context.Context) ([]Parked, error) {
	ids, err := members(ctx, a.rdb, a.ks.AllActive())
	if err != nil {
		return nil, err
	}
	var out []Parked
	for _, id := range ids {
		vals, err := a.rdb.HMGet(ctx, a.ks.Thread(id), "status", AdmActField, AdmTenantField, "waiting_for", "version").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		if len(vals) < 5 || vals[0] != string(thread.StatusWaiting) {
			continue
		}
		act, _ := vals[1].(string)
		if act == "" {
			continue
		}
		p := Parked{ThreadID: id, Act: act}
		p.Tenant, _ = vals[2].(string)
		p.WaitingFor, _ = vals[3].(string)
		_, _ = fmt.Sscan(fmt.Sprint(vals[4]), &p.Version)
		out = append(out, p)
	}
	return out, nil
}
