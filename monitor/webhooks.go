package monitor

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/spool-run/spool/orchestrator"
)

// The webhooks page: every endpoint that was sent a delivery, with its
// counters (deliveries made, attempts delivered, retried and given up),
// and the newest deliveries, filtered by endpoint and status, each with
// its attempts and last answer; a delivery can be sent again (Redeliver,
// behind a confirmation), with the same webhook-id and body, as `spool
// webhook redeliver` does.

// webhooksData is the webhooks page.
type webhooksData struct {
	Endpoint, Status string
	Statuses         []string
	Endpoints        []webhookRow
	Deliveries       []*orchestrator.WebhookDelivery
	Due              int64
	Late             string // how overdue the oldest due delivery is ("" when none is)
	ReadOnly         bool
}

// webhookRow is one endpoint's counters.
type webhookRow struct {
	Name                              string
	Made, Delivered, Retried, GivenUp int64
}

// webhookPageLimit is how many deliveries the page lists.
const webhookPageLimit = 100

func (m *Monitor) serveWebhooks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := webhooksData{Endpoint: strings.TrimSpace(q.Get("endpoint")), Status: strings.TrimSpace(q.Get("status")),
		Statuses: orchestrator.DeliveryStatuses, ReadOnly: m.cfg.ReadOnly}
	if d.Status != "" && !slices.Contains(d.Statuses, d.Status) {
		m.errorPage(w, r, http.StatusBadRequest, fmt.Sprintf("no delivery status %q: want one of %s", d.Status, strings.Join(d.Statuses, ", ")))
		return
	}
	ctx := r.Context()
	st, err := m.cfg.Orch.WebhookStats(ctx)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	d.Due = st.Due
	if !st.OldestDue.IsZero() {
		if late := m.cfg.Orch.Now().Sub(st.OldestDue); late > 0 {
			d.Late = late.Round(1e9).String()
		}
	}
	for name, made := range st.Made {
		a := st.Attempts[name]
		d.Endpoints = append(d.Endpoints, webhookRow{Name: name, Made: made, Delivered: a[orchestrator.DeliveryDelivered],
			Retried: a[orchestrator.DeliveryRetrying], GivenUp: a[orchestrator.DeliveryFailed]})
	}
	slices.SortFunc(d.Endpoints, func(a, b webhookRow) int { return strings.Compare(a.Name, b.Name) })
	d.Deliveries, err = m.cfg.Orch.WebhookDeliveries(ctx, orchestrator.DeliveryFilter{Endpoint: d.Endpoint, Status: d.Status, Limit: webhookPageLimit})
	if err != nil {
		m.fail(w, r, err)
		return
	}
	m.render(w, r, http.StatusOK, m.pages.webhooks, page{Title: "Webhooks", Nav: "webhooks", Data: d})
}

// serveRedeliver sends delivery {id} again, once confirmed.
func (m *Monitor) serveRedeliver(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !m.postForm(w, r) {
		return
	}
	ret := back(r, "/webhooks")
	ctx := r.Context()
	dl, err := m.cfg.Orch.WebhookDelivery(ctx, id)
	if errors.Is(err, orchestrator.ErrDeliveryNotFound) {
		m.redirect(w, r, ret, flash{Text: fmt.Sprintf("No delivery %s (kept %s after it was made).", id, orchestrator.WebhookRetention), Bad: true})
		return
	}
	if err != nil {
		m.fail(w, r, err)
		return
	}
	if r.PostFormValue("confirmed") != "1" {
		m.confirm(w, r, confirmData{Question: "Send this delivery again?", Action: "/webhooks/" + id + "/redeliver", Button: "Redeliver", Back: ret,
			Details: [][2]string{{"delivery", dl.ID}, {"event", dl.EventID + " (" + dl.Type + ")"}, {"endpoint", dl.Endpoint + " " + dl.URL},
				{"run", dl.Run}, {"status", fmt.Sprintf("%s after %d attempts", dl.Status, dl.Attempts)}},
			Fields: [][2]string{{"return", ret}}})
		return
	}
	if _, err := m.cfg.Orch.Redeliver(ctx, id); err != nil {
		m.fail(w, r, err)
		return
	}
	m.redirect(w, r, ret, flash{Text: fmt.Sprintf("Delivery %s to %s is due again: the same webhook-id (%s) and body, its attempts counted afresh.", id, dl.Endpoint, dl.EventID)})
}
