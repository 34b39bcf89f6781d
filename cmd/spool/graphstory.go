package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spool-run/spool/spooltype"
)

// What the CLI says of a graph run's chain: a resumed run and the run it
// resumed read as one story, so each names the other, and both count
// spend as the chain does (one budget carried on across its runs).

// printChain prints the runs r's chain links it to: the run it resumed,
// the run that resumed it.
func printChain(w io.Writer, r *spooltype.Record) {
	if r.PreviousThreadID != "" {
		fmt.Fprintf(w, "resumes    %s\n", r.PreviousThreadID)
	}
	if r.ContinuationThreadID != "" {
		fmt.Fprintf(w, "resumed as %s\n", r.ContinuationThreadID)
	}
}

// spendLine is run r's spend against its limit, both its chain's: "$0.006520
// of $0.5 (the run and its children)", or, for a resumed run, "(this run,
// the runs it resumed and their children)". A run that was resumed since
// says what it had spent when it ended.
func spendLine(ctx context.Context, s *services, r *spooltype.Record) string {
	spend, limit := runSpend(ctx, s, r)
	if r.ContinuationThreadID != "" {
		spend = r.Cost.Spend
	}
	what := "the run and its children"
	if r.PreviousThreadID != "" {
		what = "this run, the runs it resumed and their children"
	}
	return fmt.Sprintf("$%.6f of $%g (%s)", spend, limit, what)
}

// runSpend is what run r and its children have spent, across its chain
// (its ledger entry's, live), and the chain's spend limit: a resumed run
// carries on its chain's budget, so both are the chain's. The record's
// own, when the ledger does not answer (or s is nil).
func runSpend(ctx context.Context, s *services, r *spooltype.Record) (spend, limit float64) {
	if s == nil {
		return r.Cost.Spend, r.Limits.Spend
	}
	e, err := s.orch.LedgerEntry(ctx, r.LedgerID())
	if err != nil {
		return r.Cost.Spend, r.Limits.Spend
	}
	return e.Actual, e.Max
}
