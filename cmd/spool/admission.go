package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	adm "github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/thread"
)

func admissionCommand() *cli.Command {
	return &cli.Command{
		Name:  "admission",
		Usage: "the fleet's admission policy: tenants' weights and ceilings, concurrency keys",
		Subcommands: []*cli.Command{{
			Name:      "apply",
			Usage:     "validate an admission policy (default: the project's .ai/config/agent/admission.yaml) and publish it for the fleet",
			ArgsUsage: "[FILE]",
			Flags: []cli.Flag{jsonFlag(), &cli.BoolFlag{Name: "dry-run", Usage: "validate and print the policy; publish nothing"},
				&cli.BoolFlag{Name: "reset-overrides", Usage: "also clear every tenant's overrides (spool tenant set)"}},
			Action: admissionApply,
		}, {
			Name:   "show",
			Usage:  "the published admission policy (off when none)",
			Flags:  []cli.Flag{jsonFlag()},
			Action: admissionShow,
		}, {
			Name:   "off",
			Usage:  "withdraw the published policy: nothing waits for admission, every parked activation is enqueued",
			Flags:  []cli.Flag{jsonFlag()},
			Action: admissionOff,
		}},
	}
}

// policyFile reads and validates the policy of FILE, else the project's;
// a file that does not validate is admission_policy_invalid (exit 1).
func policyFile(c *cli.Context) (*adm.Policy, string, error) {
	if c.NArg() > 1 {
		return nil, "", usagef("%s takes one FILE at most", commandPath(c))
	}
	var pol *adm.Policy
	var path string
	var err error
	if c.NArg() == 1 {
		path = c.Args().First()
		data, rerr := os.ReadFile(path)
		if rerr != nil {
			return nil, "", fmt.Errorf("read %s: %w", path, rerr)
		}
		pol, err = adm.Parse(path, data)
	} else {
		proj, perr := existingProject(c)
		if perr != nil {
			return nil, "", perr
		}
		pol, path, err = adm.Load(os.DirFS(proj))
		if path == "" && err == nil {
			return nil, "", fmt.Errorf("no admission policy: %s does not exist in %s (name a FILE)", adm.Paths[0], proj)
		}
	}
	var pe *adm.Error
	if errors.As(err, &pe) {
		return nil, path, &thread.AdmissionError{Code: adm.CodePolicyInvalid, Message: pe.Error()}
	}
	return pol, path, err
}

// appliedPolicy is what `admission apply --json` prints.
type appliedPolicy struct {
	Version        int64    `json:"version,omitempty"`
	Digest         string   `json:"digest"`
	Changed        bool     `json:"changed"`
	DryRun         bool     `json:"dry_run"`
	Source         string   `json:"source"`
	Rules          []string `json:"rules"`
	Tenants        []string `json:"tenants"`
	ResetOverrides bool     `json:"reset_overrides"`
	// Granted is how many parked activations the new policy's room let
	// start at once.
	Granted int `json:"granted"`
}

func admissionApply(c *cli.Context) error {
	pol, path, err := policyFile(c)
	if err != nil {
		return err
	}
	out := appliedPolicy{Digest: pol.Digest(), DryRun: c.Bool("dry-run"), Source: path, Rules: []string{}, Tenants: []string{},
		ResetOverrides: c.Bool("reset-overrides")}
	for _, r := range pol.Concurrency {
		out.Rules = append(out.Rules, r.Name)
	}
	for t := range pol.Tenants {
		out.Tenants = append(out.Tenants, t)
	}
	sort.Strings(out.Tenants)
	if !out.DryRun {
		if err := publishPolicy(c, pol, path, &out); err != nil {
			return err
		}
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, out)
	}
	w := c.App.Writer
	switch {
	case out.DryRun:
		fmt.Fprintf(w, "%s is valid (%s): not published (--dry-run)\n", path, out.Digest)
	case out.Changed:
		fmt.Fprintf(w, "admission policy version %d published from %s (%s)\n", out.Version, path, out.Digest)
	default:
		fmt.Fprintf(w, "admission policy version %d is already %s (%s)\n", out.Version, path, out.Digest)
	}
	fmt.Fprintf(w, "rules: %s\ntenants: %s\n", listOrNone(out.Rules), listOrNone(out.Tenants))
	if out.Granted > 0 {
		fmt.Fprintf(w, "%s admitted\n", thread.Count(out.Granted, "waiting activation", "waiting activations"))
	}
	return nil
}

func listOrNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

// publishPolicy publishes pol (admission apply).
func publishPolicy(c *cli.Context, pol *adm.Policy, path string, out *appliedPolicy) error {
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	p, changed, granted, err := publishWith(c, s, pol, path, out.ResetOverrides)
	if err != nil {
		return err
	}
	out.Version, out.Changed, out.Granted = p.Version, changed, granted
	return nil
}

// publishWith publishes pol, read from path, on s and brings every tenant
// it lists, and every active one, up to it: their settings written into
// their slots (overrides cleared with reset), and what the new room lets
// start granted and enqueued before it returns (how many: granted).
func publishWith(c *cli.Context, s *services, pol *adm.Policy, path string, reset bool) (p *adm.Published, changed bool, granted int, err error) {
	abs, _ := filepath.Abs(path)
	ad := s.orch.Admission()
	if p, changed, err = adm.Publish(c.Context, s.rdb, ad.Keys(), pol, abs, time.Now()); err != nil {
		return nil, false, 0, err
	}
	ad.Watcher().Set(p)
	tenants, err := ad.KnownTenants(c.Context)
	if err != nil {
		return p, changed, 0, err
	}
	for t := range pol.Tenants {
		tenants = appendNew(tenants, t)
	}
	for _, t := range tenants {
		n, err := ad.Pump(c.Context, t, adm.PumpArgs{ClearOverrides: reset})
		if err != nil {
			return p, changed, granted, err
		}
		granted += n
	}
	return p, changed, granted, nil
}

// devPolicy publishes the project's admission policy when `spool dev`
// starts (a project without one leaves admission as it is); a policy
// that does not validate stops dev (admission_policy_invalid). It
// returns the banner's line ("" for none).
func devPolicy(c *cli.Context, s *services) (string, error) {
	pol, path, err := adm.Load(os.DirFS(s.project))
	if path == "" && err == nil {
		return "", nil
	}
	var pe *adm.Error
	if errors.As(err, &pe) {
		return "", &thread.AdmissionError{Code: adm.CodePolicyInvalid, Message: pe.Error()}
	}
	if err != nil {
		return "", err
	}
	p, _, _, err := publishWith(c, s, pol, path, false)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s (version %d)", path, p.Version), nil
}

func appendNew(xs []string, x string) []string {
	for _, y := range xs {
		if y == x {
			return xs
		}
	}
	return append(xs, x)
}

// shownPolicy is what `admission show --json` prints.
type shownPolicy struct {
	On bool `json:"on"`
	*adm.Published
}

func admissionShow(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	p, err := adm.Read(c.Context, s.rdb, s.orch.Admission().Keys())
	if err != nil {
		return err
	}
	if p == nil {
		p = &adm.Published{}
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, shownPolicy{On: p.On(), Published: p})
	}
	printPolicy(c.App.Writer, p)
	return nil
}

func printPolicy(w io.Writer, p *adm.Published) {
	if !p.On() {
		fmt.Fprintln(w, "admission off: no policy is published (spool admission apply publishes one)")
		return
	}
	pol := p.Policy
	fmt.Fprintf(w, "admission on: policy version %d (%s)\n", p.Version, p.Digest)
	fmt.Fprintf(w, "published %s from %s\n", p.PublishedAt.Format(time.RFC3339), p.Source)
	fmt.Fprintf(w, "fair share every %s, yield after %s; grants live %s, durability %s; open tenants: %v\n",
		pol.FairShare.Interval.D(), pol.YieldAfter(), pol.Grants.TTL.D(), pol.Grants.Durability, pol.OpenTenants)
	names := make([]string, 0, len(pol.Tenants))
	for t := range pol.Tenants {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		st := adm.Effective(pol, t, nil)
		fmt.Fprintf(w, "tenant %s: weight %g, priority %d%s\n", t, st.Weight, st.Priority, maxRunningText(st.MaxRunning))
	}
	for _, r := range pol.Concurrency {
		globs := append(append([]string(nil), r.Directives...), r.Graphs...)
		fmt.Fprintf(w, "rule %s: %s over %s, max %d\n", r.Name, r.Key, strings.Join(globs, " "), r.Max)
	}
}

func maxRunningText(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", max_running %d", n)
}

func admissionOff(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	ad := s.orch.Admission()
	p, changed, err := adm.Withdraw(c.Context, s.rdb, ad.Keys(), time.Now())
	if err != nil {
		return err
	}
	ad.Watcher().Set(p)
	tenants, err := ad.KnownTenants(c.Context)
	if err != nil {
		return err
	}
	n := 0
	for _, t := range tenants {
		k, err := ad.Drain(c.Context, t)
		n += k
		if err != nil {
			return err
		}
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, map[string]any{"on": false, "version": p.Version, "changed": changed, "enqueued": n})
	}
	fmt.Fprintf(c.App.Writer, "admission off (policy version %d): %s enqueued\n", p.Version, thread.Count(n, "waiting activation", "waiting activations"))
	return nil
}

// policyDrift warns, once per process, when the project's admission
// policy differs from the one published (driftCommands): `spool
// admission apply` publishes it.
var policyDrift sync.Once

// driftCommands are the commands that warn of a policy that differs.
var driftCommands = map[string]bool{"thread run": true, "graph run": true, "api": true, "scheduler": true}

func warnPolicyDrift(c *cli.Context, s *services) {
	policyDrift.Do(func() {
		pol, path, err := adm.Load(os.DirFS(s.project))
		if path == "" {
			return
		}
		p, rerr := adm.Read(c.Context, s.rdb, s.orch.Admission().Keys())
		switch {
		case rerr != nil:
			return
		case err != nil:
			fmt.Fprintf(c.App.ErrWriter, "spool: warning: %s does not validate (%v); the fleet runs the published policy\n", path, err)
		case !p.On() || p.Digest != pol.Digest():
			fmt.Fprintf(c.App.ErrWriter, "spool: warning: %s differs from the published admission policy; `spool admission apply` publishes it\n", path)
		}
	})
}

// waitingForFlag is --waiting-for, checked; "" when not given.
func waitingForFlag(c *cli.Context) (string, error) {
	w := c.String("waiting-for")
	if w == "" {
		return "", nil
	}
	if orchestrator.CheckWaitingFor(w) != nil {
		return "", usagef("--waiting-for %q: want one of %s", w, strings.Join(orchestrator.WaitingReasons, ", "))
	}
	return w, nil
}
