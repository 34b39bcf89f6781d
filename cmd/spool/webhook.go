package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/orchestrator"
)

// webhookCommand is `spool webhook list | deliveries | redeliver`: the
// endpoints of the project's webhooks.yaml and the deliveries of run
// events to them (orchestrator webhooks).
func webhookCommand() *cli.Command {
	return &cli.Command{
		Name:  "webhook",
		Usage: "webhooks on run events: endpoints, deliveries, redelivery",
		Subcommands: []*cli.Command{
			{Name: "list", Usage: "the project's endpoints (.ai/config/webhooks.yaml) with their deliveries' counts by status",
				Flags: []cli.Flag{jsonFlag()}, Action: webhookList},
			{Name: "deliveries", Usage: "deliveries, newest first: event, run, status, attempts and the last answer", Flags: []cli.Flag{jsonFlag(),
				&cli.StringFlag{Name: "endpoint", Usage: "only this endpoint's (--notify for runs' one-off URLs)"},
				&cli.StringFlag{Name: "status", Usage: "only deliveries in this status: pending, delivering, retrying, delivered or failed"},
				&cli.IntFlag{Name: "limit", Value: 50, Usage: "list at most this many"}}, Action: webhookDeliveries},
			{Name: "redeliver", Usage: "deliver again, now, with the same webhook-id and body (a failed delivery gets its attempts afresh)",
				ArgsUsage: "DELIVERY_ID", Flags: []cli.Flag{jsonFlag()}, Action: webhookRedeliver},
		},
	}
}

// webhookEndpoint is one endpoint as `webhook list` shows it.
type webhookEndpoint struct {
	Name      string         `json:"name"`
	URL       string         `json:"url"`
	Events    []string       `json:"events"`
	SecretEnv string         `json:"secret_env,omitempty"`
	SecretSet bool           `json:"secret_set"`
	Counts    map[string]int `json:"deliveries"`
}

func webhookList(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	dir, err := projectDir(c)
	if err != nil {
		return err
	}
	hooks, err := config.LoadWebhooks(os.DirFS(dir))
	if err != nil {
		return err
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	ds, err := s.orch.WebhookDeliveries(c.Context, orchestrator.DeliveryFilter{Limit: 100000})
	if err != nil {
		return err
	}
	counts := orchestrator.WebhookCounts(ds)
	out := []webhookEndpoint{}
	for _, e := range hooks.Sorted() {
		out = append(out, webhookEndpoint{Name: e.Name, URL: e.URL, Events: e.Subscribed(), SecretEnv: e.SecretEnv,
			SecretSet: e.SecretEnv != "" && os.Getenv(e.SecretEnv) != "", Counts: nonNil(counts[e.Name])})
	}
	if n := counts[config.NotifyEndpoint]; n != nil {
		out = append(out, webhookEndpoint{Name: config.NotifyEndpoint, Events: []string{"run.*"}, SecretEnv: orchestrator.NotifySecretEnv,
			SecretSet: os.Getenv(orchestrator.NotifySecretEnv) != "", Counts: n})
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, map[string]any{"endpoints": out})
	}
	printEndpoints(c, out)
	return nil
}

// printEndpoints is `webhook list` for people.
func printEndpoints(c *cli.Context, out []webhookEndpoint) {
	if len(out) == 0 {
		fmt.Fprintln(c.App.Writer, "no endpoints: add them to .ai/config/webhooks.yaml")
		return
	}
	for _, e := range out {
		url := e.URL
		if url == "" {
			url = "(each run's own URL)"
		}
		secret := "unsigned"
		if e.SecretEnv != "" {
			secret = "signed with $" + e.SecretEnv
			if !e.SecretSet {
				secret += " (not set here)"
			}
		}
		fmt.Fprintf(c.App.Writer, "%s  %s  %s  %s\n", e.Name, url, strings.Join(e.Events, ","), secret)
		if len(e.Counts) > 0 {
			fmt.Fprintf(c.App.Writer, "    deliveries: %s\n", countLine(e.Counts))
		}
	}
}

// countLine is "delivered 3, failed 1" in a fixed order of statuses.
func countLine(m map[string]int) string {
	var parts []string
	for _, st := range []string{orchestrator.DeliveryDelivered, orchestrator.DeliveryPending, orchestrator.DeliveryDelivering,
		orchestrator.DeliveryRetrying, orchestrator.DeliveryFailed} {
		if m[st] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", st, m[st]))
		}
	}
	return strings.Join(parts, ", ")
}

func nonNil(m map[string]int) map[string]int {
	if m == nil {
		return map[string]int{}
	}
	return m
}

func webhookDeliveries(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	status := c.String("status")
	if status != "" && !slices.Contains(orchestrator.DeliveryStatuses, status) {
		return usagef("--status %q: one of %s", status, strings.Join(orchestrator.DeliveryStatuses, ", "))
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	ds, err := s.orch.WebhookDeliveries(c.Context, orchestrator.DeliveryFilter{Endpoint: c.String("endpoint"), Status: status, Limit: c.Int("limit")})
	if err != nil {
		return err
	}
	out := append([]*orchestrator.WebhookDelivery{}, ds...) // [] when none
	if c.Bool("json") {
		return printJSON(c.App.Writer, map[string]any{"deliveries": out})
	}
	if len(out) == 0 {
		fmt.Fprintln(c.App.Writer, "no deliveries")
		return nil
	}
	for _, d := range out {
		printDelivery(c, d)
	}
	return nil
}

// printDelivery is one line of a delivery.
func printDelivery(c *cli.Context, d *orchestrator.WebhookDelivery) {
	line := fmt.Sprintf("%s  %-10s  %-20s  %-12s  %s  %s  attempts %d", d.ID, d.Status, d.Type, d.Endpoint, d.Run, d.EventID, d.Attempts)
	switch {
	case d.LastCode != 0 && d.LastError != "":
		line += fmt.Sprintf("  last: %d %s", d.LastCode, d.LastError)
	case d.LastError != "":
		line += "  last: " + d.LastError
	}
	if d.NextAt != nil && d.Status == orchestrator.DeliveryRetrying {
		line += "  next " + d.NextAt.Format(time.RFC3339)
	}
	fmt.Fprintln(c.App.Writer, line)
}

func webhookRedeliver(c *cli.Context) error {
	if c.NArg() != 1 {
		return usagef("webhook redeliver takes one delivery ID, got %d arguments", c.NArg())
	}
	id := c.Args().First()
	if !strings.HasPrefix(id, "dlv_") {
		return usagef("%q is not a delivery ID (dlv_...: spool webhook deliveries lists them)", id)
	}
	s, err := openServices(c, openOpts{})
	if err != nil {
		return err
	}
	defer s.Close()
	d, err := s.orch.Redeliver(c.Context, id)
	if errors.Is(err, orchestrator.ErrDeliveryNotFound) {
		return &exitError{code: 1, err: fmt.Errorf("webhook delivery %s not found", id)}
	}
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, d)
	}
	fmt.Fprintf(c.App.Writer, "delivery %s of %s to %s is due again (webhook-id %s)\n", d.ID, d.Type, d.Endpoint, d.EventID)
	return nil
}
