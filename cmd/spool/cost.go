package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/orchestrator"
)

// costCommand is `spool cost report`: where the money went, grouped by
// one key, from every run's own charges (orchestrator.CostReport).
func costCommand() *cli.Command {
	return &cli.Command{
		Name:  "cost",
		Usage: "where the money went",
		Subcommands: []*cli.Command{{
			Name:  "report",
			Usage: "spend, runs and tokens grouped by directive, model, tenant, a tag's value or day (exact: each run's charges)",
			Flags: append([]cli.Flag{jsonFlag(),
				&cli.StringFlag{Name: "by", Value: "directive", Usage: "group by directive, model, tenant, day (UTC) or tag:KEY"},
				&cli.StringFlag{Name: "directive", Usage: "only runs of this directive or graph"},
				tenantListFlag("runs")}, listFlags()[:3]...),
			Action: costReport,
		}},
	}
}

func costReport(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	by := c.String("by")
	if err := orchestrator.CheckCostKey(by); err != nil {
		return usagef("%v", err)
	}
	tenant, err := listTenant(c)
	if err != nil {
		return err
	}
	f := orchestrator.Filter{Directive: c.String("directive"), Tenant: tenant}
	if err := listFilter(c, &f); err != nil {
		return err
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	rep, err := s.orch.CostReport(c.Context, by, f)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, rep)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tSPEND\tRUNS\tINPUT TOKENS\tOUTPUT TOKENS\t\n", by)
	for _, r := range append(rep.Rows, rep.Total) {
		fmt.Fprintf(tw, "%s\t$%.6f\t%d\t%d\t%d\t\n", r.Key, r.Spend, r.Runs, r.InputTokens, r.OutputTokens)
	}
	return tw.Flush()
}
