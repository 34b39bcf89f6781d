package monitor

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// maxTenantWaiting bounds the waiting runs a tenant page lists (the
// first in line of each wait first); the count says how many there are.
const maxTenantWaiting = 100

// admissionHead is what the tenants pages say of admission as a whole:
// whether a policy is published (off: nothing waits for admission) and
// the fleet's worker slots that fair share divides.
type admissionHead struct {
	On       bool   `json:"on"`
	Digest   string `json:"digest,omitempty"`
	Version  int64  `json:"version,omitempty"`
	Capacity int    `json:"capacity"`
}

// tenantsData is the tenants page (/tenants) and /api/tenants: every
// tenant known, as `spool tenant list --json` has them.
type tenantsData struct {
	admissionHead
	Tenants []*spooltype.Tenant `json:"tenants"`
	// Overrun is, by tenant and window (day, month), what was spent
	// beyond the allowances lent: spend no ceiling could stop.
	Overrun map[string]map[string]float64 `json:"overrun"`
}

// tenantData is a tenant's page (/tenants/T) and /api/tenants/T: the
// tenant as `spool tenant show --json` has it, its settings with their
// sources, its admission counters and the runs admission holds.
type tenantData struct {
	admissionHead
	Tenant   *spooltype.Tenant `json:"tenant"`
	Settings []tenantSetting   `json:"settings"`
	// Grants, Reaped (by the state the grant was in) and Refusals (by
	// code) are the tenant's admission counters since its state began.
	Grants   int            `json:"grants"`
	Reaped   map[string]int `json:"reaped"`
	Refusals map[string]int `json:"refusals"`
	// Overrun is, by window, what was spent beyond the allowances lent.
	Overrun map[string]float64 `json:"overrun"`
	// Waiting are its runs admission holds, by what they wait for, then
	// key, then place in line; WaitingTotal counts them all when more
	// than maxTenantWaiting.
	Waiting      []*spooltype.Record `json:"waiting"`
	WaitingTotal int                 `json:"waiting_total"`
}

// tenantSetting is one setting of a tenant in force: its value, where it
// comes from (override, tenant, tenant_defaults, default) and, when
// `tenant set` overrode it, the override.
type tenantSetting struct {
	Name     string `json:"name"`
	Value    string `json:"value"`
	Source   string `json:"source"`
	Override string `json:"override,omitempty"`
}

// serveTenants serves the tenants page and its JSON: each tenant's
// weight, share, activations running, ready and blocked by reason, root
// chains in flight and spend in the UTC day and month against its
// ceilings, read as `spool tenant list` reads them.
func (m *Monitor) serveTenants(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ts, err := m.cfg.Orch.TenantStatuses(ctx)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	d := tenantsData{Tenants: ts, Overrun: map[string]map[string]float64{}}
	var s *admission.Scrape
	if d.admissionHead, s, err = m.admissionHead(r); err != nil {
		m.fail(w, r, err)
		return
	}
	for _, t := range s.Tenants {
		d.Overrun[t.Tenant] = t.Overrun
	}
	if strings.HasPrefix(r.URL.Path, "/api/") {
		writeJSON(w, http.StatusOK, d)
		return
	}
	m.render(w, r, http.StatusOK, m.pages.tenants, page{Title: "Tenants", Nav: "tenants", Data: d})
}

// admissionHead reads whether admission is on and the fleet's capacity,
// with the scrape of every tenant's counters it read them from.
func (m *Monitor) admissionHead(r *http.Request) (admissionHead, *admission.Scrape, error) {
	adm := m.cfg.Orch.Admission()
	s, err := adm.Scrape(r.Context())
	if err != nil {
		return admissionHead{}, nil, err
	}
	h := admissionHead{Capacity: s.Capacity}
	if p := adm.Policy(); p.On() {
		h.On, h.Digest, h.Version = true, p.Digest, p.Version
	}
	return h, s, nil
}

// serveTenant serves a tenant's page and its JSON: the tenant as `spool
// tenant show` reads it (settings and their sources, spend windows with
// what is held, the concurrency keys it holds or waits for), its
// admission counters, and the runs admission holds with what each waits
// for. An unknown tenant is 404, as `tenant show` says tenant_not_found.
func (m *Monitor) serveTenant(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name := r.PathValue("tenant")
	t, err := m.cfg.Orch.TenantStatus(ctx, name)
	if err != nil {
		m.tenantFailed(w, r, err)
		return
	}
	waiting, err := m.cfg.Orch.TenantWaiting(ctx, name)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	d := tenantData{Tenant: t, Settings: tenantSettings(t, m.cfg.Orch.Admission().Policy()), Reaped: map[string]int{},
		Refusals: map[string]int{}, WaitingTotal: len(waiting)}
	var s *admission.Scrape
	if d.admissionHead, s, err = m.admissionHead(r); err != nil {
		m.fail(w, r, err)
		return
	}
	for _, ts := range s.Tenants {
		if ts.Tenant == name {
			d.Grants, d.Reaped, d.Refusals, d.Overrun = ts.Grants, ts.Reaped, ts.Refusals, ts.Overrun
		}
	}
	sortWaiting(waiting)
	d.Waiting = waiting[:min(len(waiting), maxTenantWaiting)]
	if strings.HasPrefix(r.URL.Path, "/api/") {
		writeJSON(w, http.StatusOK, d)
		return
	}
	m.render(w, r, http.StatusOK, m.pages.tenant, page{Title: "Tenant " + name, Nav: "tenants", Data: d})
}

// tenantFailed answers a tenant that cannot be read with its refusal's
// status (404 tenant_not_found for a tenant nothing knows of, 400 for a
// name no tenant can have), else 500.
func (m *Monitor) tenantFailed(w http.ResponseWriter, r *http.Request, err error) {
	var ae *thread.AdmissionError
	if !errors.As(err, &ae) {
		m.fail(w, r, err)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/api/") {
		jsonError(w, ae.Status(), err.Error())
		return
	}
	m.errorPage(w, r, ae.Status(), err.Error())
}

// sortWaiting orders a tenant's waiting runs as its page lists them: by
// what they wait for, then the key, then their place in line (those in
// no line last), then the longest waiting first.
func sortWaiting(recs []*spooltype.Record) {
	slices.SortStableFunc(recs, func(a, b *spooltype.Record) int {
		pos := func(r *spooltype.Record) int {
			if r.Position <= 0 {
				return int(^uint(0) >> 1)
			}
			return r.Position
		}
		return cmp.Or(cmp.Compare(a.WaitingFor, b.WaitingFor), cmp.Compare(a.WaitingKey, b.WaitingKey),
			cmp.Compare(pos(a), pos(b)), waitingSince(a).Compare(waitingSince(b)))
	})
}

// waitingSince is when r began to wait: as admission has it, else its
// record's last update.
func waitingSince(r *spooltype.Record) time.Time {
	if r.WaitingSince != nil {
		return *r.WaitingSince
	}
	return r.UpdatedAt
}

// tenantSettings are t's settings in force, in the order of
// admission.Fields, each with its source and override: the values `tenant
// show` prints, and spend_grant from the same settings of the published
// policy.
func tenantSettings(t *spooltype.Tenant, p *admission.Published) []tenantSetting {
	var pol *admission.Policy
	if p.On() {
		pol = p.Policy
	}
	l := t.Limits
	values := map[string]string{
		"weight": strconv.FormatFloat(t.Weight, 'g', -1, 64), "priority": strconv.Itoa(t.Priority),
		"max_running": intOrNone(l.MaxRunning), "spend_per_day": usdOr(l.SpendPerDay, "none"), "spend_per_month": usdOr(l.SpendPerMonth, "none"),
		"starts_per_minute": intOrNone(l.StartsPerMinute), "runs_in_flight": intOrNone(l.RunsInFlight), "on_exhausted": l.OnExhausted,
		"spend_grant": fmt.Sprintf("$%.2f", admission.Effective(pol, t.Tenant, t.Overrides).SpendGrant),
	}
	out := make([]tenantSetting, 0, len(admission.Fields))
	for _, f := range admission.Fields {
		out = append(out, tenantSetting{Name: f, Value: cmp.Or(values[f], "—"), Source: t.Sources[f], Override: t.Overrides[f]})
	}
	return out
}

func intOrNone(p *int) string {
	if p == nil {
		return "none"
	}
	return strconv.Itoa(*p)
}
