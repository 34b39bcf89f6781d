package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	adm "github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// tenantSetFlags are `tenant set`'s settings: flag name → setting (the
// policy file's key).
var tenantSetFlags = []struct{ flag, field, usage string }{
	{"weight", "weight", "share of the fleet against other tenants' (0.01 .. 1000)"},
	{"priority", "priority", "default priority of its roots (1 highest .. 5)"},
	{"max-running", "max_running", "admitted activations at once (≥ 1)"},
	{"spend-per-day", "spend_per_day", "USD per UTC day"},
	{"spend-per-month", "spend_per_month", "USD per UTC month"},
	{"starts-per-minute", "starts_per_minute", "root chain starts per minute"},
	{"runs-in-flight", "runs_in_flight", "root chains admitted and not finished"},
	{"on-exhausted", "on_exhausted", "wait or refuse, when a ceiling is reached"},
}

func tenantCommand() *cli.Command {
	setFlags := []cli.Flag{jsonFlag(), &cli.StringSliceFlag{Name: "clear", Usage: "drop the override of this setting (weight, max_running, ...); repeatable"}}
	for _, f := range tenantSetFlags {
		setFlags = append(setFlags, &cli.StringFlag{Name: f.flag, Usage: f.usage})
	}
	return &cli.Command{
		Name:  "tenant",
		Usage: "tenants: their share of the fleet, what they run and wait for, their settings",
		Subcommands: []*cli.Command{{
			Name:   "list",
			Usage:  "every tenant known, with its weight, share, running, ready and blocked activations",
			Flags:  []cli.Flag{jsonFlag()},
			Action: tenantList,
		}, {
			Name:      "show",
			Usage:     "one tenant: share, running, ready, blocked by reason, limits and where each comes from, spend (spent, held and overrun per window), keys",
			ArgsUsage: "TENANT",
			Flags:     []cli.Flag{jsonFlag()},
			Action:    tenantShow,
		}, {
			Name: "set",
			Usage: "override a tenant's settings (they survive `admission apply` until --clear or apply --reset-overrides); " +
				"what the new room admits starts at once",
			ArgsUsage: "TENANT",
			Flags:     setFlags,
			Action:    tenantSet,
		}},
	}
}

func tenantList(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	ts, err := s.orch.TenantStatuses(c.Context)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, ts)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "%-24s %7s %4s %6s %8s %6s %8s %s\n", "TENANT", "WEIGHT", "PRIO", "SHARE", "RUNNING", "READY", "RUNS", "BLOCKED")
	for _, t := range ts {
		fmt.Fprintf(w, "%-24s %7g %4d %6d %8d %6d %8d %s\n", t.Tenant, t.Weight, t.Priority, t.Share, t.Running, t.Ready, t.Runs, blockedText(t.Blocked))
	}
	printAdmissionOff(c, s)
	return nil
}

// printAdmissionOff says, under a tenant's text, that no admission
// policy is published: then nothing waits for a share or a ceiling and
// the spend windows count nothing, which the zeros shown would not tell.
func printAdmissionOff(c *cli.Context, s *services) {
	p, err := adm.Read(c.Context, s.rdb, s.orch.Admission().Keys())
	if err != nil || (p != nil && p.On()) {
		return
	}
	fmt.Fprintln(c.App.Writer, "admission  off: no policy is published, so no run waits for a share or a ceiling and the spend windows count nothing (spool admission apply publishes one)")
}

// tenantName is the one TENANT argument.
func tenantName(c *cli.Context) (string, error) {
	if c.NArg() != 1 {
		return "", usagef("%s takes one TENANT", commandPath(c))
	}
	return c.Args().First(), nil
}

func tenantShow(c *cli.Context) error {
	name, err := tenantName(c)
	if err != nil {
		return err
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	t, err := s.orch.TenantStatus(c.Context, name)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, t)
	}
	printTenantStatus(c.App.Writer, t)
	printAdmissionOff(c, s)
	return nil
}

func tenantSet(c *cli.Context) error {
	name, err := tenantName(c)
	if err != nil {
		return err
	}
	set := map[string]string{}
	for _, f := range tenantSetFlags {
		if c.IsSet(f.flag) {
			set[f.field] = c.String(f.flag)
		}
	}
	var cleared []string
	for _, f := range c.StringSlice("clear") {
		cleared = append(cleared, strings.ReplaceAll(f, "-", "_"))
	}
	if len(set) == 0 && len(cleared) == 0 {
		return usagef("tenant set %s: nothing to set (--weight, --max-running, ... or --clear FIELD)", name)
	}
	if _, err := adm.ParseOverrides(set); err != nil {
		return usagef("tenant set %s: %v", name, err)
	}
	if err := orchestrator.CheckTenantFields(cleared); err != nil {
		return usagef("tenant set %s: --%v", name, err)
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	t, err := s.orch.SetTenant(c.Context, name, set, cleared)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, t)
	}
	printTenantStatus(c.App.Writer, t)
	return nil
}

// printTenantStatus is `tenant show`'s text.
func printTenantStatus(w io.Writer, t *spooltype.Tenant) {
	src := func(f string) string { return " (" + t.Sources[f] + ")" }
	fmt.Fprintf(w, "tenant     %s\n", t.Tenant)
	fmt.Fprintf(w, "weight     %g%s · priority %d%s · share %s\n", t.Weight, src("weight"), t.Priority, src("priority"), shareText(t.Share))
	fmt.Fprintf(w, "now        %d running · %d admitted · %d ready · blocked %s\n", t.Running, t.Admitted, t.Ready, blockedText(t.Blocked))
	fmt.Fprintf(w, "runs       %d · %s in flight\n", t.Runs, thread.Count(t.RunsInFlight, "root chain", "root chains"))
	l := t.Limits
	fmt.Fprintf(w, "limits     max_running %s%s · spend_per_day %s%s · spend_per_month %s%s\n", intOrNone(l.MaxRunning), src("max_running"),
		usdOrNone(l.SpendPerDay), src("spend_per_day"), usdOrNone(l.SpendPerMonth), src("spend_per_month"))
	fmt.Fprintf(w, "           starts_per_minute %s%s · runs_in_flight %s%s · on_exhausted %s%s\n", intOrNone(l.StartsPerMinute),
		src("starts_per_minute"), intOrNone(l.RunsInFlight), src("runs_in_flight"), l.OnExhausted, src("on_exhausted"))
	for _, k := range []string{"day", "month"} {
		sp := t.Spend[k]
		fmt.Fprintf(w, "spend      %-5s %s: $%.4f spent · $%.4f held · $%.4f overrun · limit %s\n", k, sp.Window, sp.Spent, sp.Held, sp.Overrun, usdOrNone(sp.Limit))
	}
	for _, k := range t.Keys {
		fmt.Fprintf(w, "key        %s=%s  %d of %d running, %d waiting\n", k.Rule, k.Value, k.Running, k.Max, k.Waiting)
	}
}

func shareText(n int) string {
	if n == 0 {
		return "- (none yet)"
	}
	return strconv.Itoa(n)
}

func blockedText(b map[string]int) string {
	var parts []string
	for r, n := range b {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", r, n))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func intOrNone(p *int) string {
	if p == nil {
		return "none"
	}
	return strconv.Itoa(*p)
}

func usdOrNone(p *float64) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprintf("$%.2f", *p)
}
