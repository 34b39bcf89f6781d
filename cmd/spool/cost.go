package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
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
	printCostTable(c.App.Writer, strings.ToUpper(by), append(rep.Rows, rep.Total))
	return nil
}

// printCostTable prints rows under their header, the names left-aligned
// and the numbers right-aligned, two spaces between columns.
func printCostTable(w io.Writer, by string, rows []spooltype.CostRow) {
	cells := [][]string{{by, "SPEND", "RUNS", "INPUT TOKENS", "OUTPUT TOKENS"}}
	for _, r := range rows {
		cells = append(cells, []string{r.Key, fmt.Sprintf("$%.6f", r.Spend), strconv.Itoa(r.Runs),
			strconv.Itoa(r.InputTokens), strconv.Itoa(r.OutputTokens)})
	}
	width := make([]int, len(cells[0]))
	for _, row := range cells {
		for i, cell := range row {
			width[i] = max(width[i], utf8.RuneCountInString(cell))
		}
	}
	for _, row := range cells {
		line := fmt.Sprintf("%-*s", width[0], row[0])
		for i, cell := range row[1:] {
			line += fmt.Sprintf("  %*s", width[i+1], cell)
		}
		fmt.Fprintln(w, line)
	}
}
