package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	adm "github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// A command that waits for runs (`thread run --wait`, `graph run --wait`,
// `graph fork --wait`, `thread wait`) says on stderr when one of them, or
// a thread or run below it, waits for a person, and how to go on, rather
// than printing nothing until its --timeout:
//
//	spool: waiting for approval at node signoff: spool thread approve demo/ship-… (or spool thread deny demo/ship-… --reason TEXT)
//
// and, when one of them waits for its tenant's spend window (parked at
// its start, or yielded at a turn boundary: waiting_for tenant_budget),
// says which window, how full, and how to raise it, once per wait:
//
//	spool: waiting for tenant acme's spend window (day 1.00 of 1.00 USD spent); raise it with spool tenant set acme --spend-per-day USD
//
// and, when admission holds one of them for anything else (a slot of its
// tenant's share, a concurrency key, max_running, starts_per_minute,
// runs_in_flight), where it stands and what would start it, once per
// wait:
//
//	spool: waiting for admission: concurrency per_item=x (2 of 2 running, 1st in line, 3 s); it starts when a run holding that key ends
//
// A wait for several runs names the run each of these two is about:
//
//	spool: support/reply-… is waiting for admission: concurrency per_item=x (…); it starts when a run holding that key ends

// noticeEvery is how often a wait looks for decisions it waits on.
const noticeEvery = 500 * time.Millisecond

// waitFor waits for ids (following the first with --follow) for at most
// --timeout, printing a notice for each decision the wait comes to wait
// on.
func waitFor(c *cli.Context, s *services, ids []string) (map[string]*spooltype.Record, error) {
	stopFollow := func() {}
	if c.Bool("follow") {
		stopFollow = startFollow(c, s, ids[0])
	}
	stopNotices := startNotices(c, s, ids)
	res, err := s.orch.Wait(c.Context, ids, c.Duration("timeout"))
	stopNotices()
	stopFollow()
	return res, err
}

// startNotices prints, until stop, a line for each pending decision in
// the trees of ids, once.
func startNotices(c *cli.Context, s *services, ids []string) (stop func()) {
	ctx, cancel := context.WithCancel(c.Context)
	done := make(chan struct{})
	seen := map[string]bool{}
	go func() {
		defer close(done)
		for {
			for _, p := range pendingBelow(ctx, s, ids) {
				if key := p.call.ThreadID + "\x00" + p.call.CallID + "\x00" + p.call.RequestID; !seen[key] {
					seen[key] = true
					fmt.Fprintln(c.App.ErrWriter, "spool: "+p.notice())
				}
			}
			for _, b := range budgetWaits(ctx, s, ids) {
				if key := fmt.Sprintf("%s\x00budget\x00%d", b.rec.ThreadID, b.rec.Version); !seen[key] {
					seen[key] = true
					fmt.Fprintln(c.App.ErrWriter, "spool: "+whose(ids, b.rec.ThreadID)+b.notice())
				}
			}
			for _, m := range messageWaits(ctx, s, ids) {
				if key := fmt.Sprintf("%s\x00message\x00%d", m.ThreadID, m.Version); !seen[key] {
					seen[key] = true
					fmt.Fprintln(c.App.ErrWriter, "spool: "+messageNotice(m))
				}
			}
			for _, a := range admissionWaits(ctx, s, ids) {
				if key := fmt.Sprintf("%s\x00%s\x00%d", a.rec.ThreadID, a.rec.WaitingFor, a.rec.Version); !seen[key] {
					seen[key] = true
					fmt.Fprintln(c.App.ErrWriter, "spool: "+whose(ids, a.rec.ThreadID)+a.notice())
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(noticeEvery):
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// whose names the run a notice is about when the wait is for more than
// one ("RUN is "), so that a reader of `thread wait A B C` can tell which
// is held; "" for a wait on one run, whose notice needs no name.
func whose(ids []string, id string) string {
	if len(ids) < 2 {
		return ""
	}
	return id + " is "
}

// pending is a call waiting for a decision, with the record of the
// thread or run that made it; waited: that is a thread of a chain the
// command waits for (its notice need not name it but in the command).
type pending struct {
	call   orchestrator.PendingCall
	rec    *spooltype.Record
	waited bool
}

// pendingBelow are the calls waiting for a decision in the trees of ids:
// made by a thread of one of their chains, or by a descendant of one.
func pendingBelow(ctx context.Context, s *services, ids []string) []pending {
	calls, err := s.orch.Approvals(ctx, "")
	if err != nil || len(calls) == 0 {
		return nil
	}
	chains := map[string]bool{}
	for _, id := range ids {
		if ch, err := s.orch.GetChain(ctx, id); err == nil {
			for _, r := range ch.Chain {
				chains[r.ThreadID] = true
			}
		}
	}
	var out []pending
	for _, p := range calls {
		rec, err := s.orch.Record(ctx, p.ThreadID)
		if err != nil {
			continue
		}
		if chains[rec.ThreadID] || slices.ContainsFunc(rec.Ancestors, func(a string) bool { return chains[a] }) {
			out = append(out, pending{call: p, rec: rec, waited: chains[rec.ThreadID]})
		}
	}
	return out
}

// notice says what p waits for and how to go on.
func (p pending) notice() string {
	return fmt.Sprintf("waiting for %s: %s", p.what(), decideHint(p.rec.ThreadID))
}

// what is the decision p waits for: "approval at node signoff",
// "approval of tool T at node N", "approval of tool T", followed by " of
// run R" or " in thread ID" when that is a descendant of what the command
// waits for.
func (p pending) what() string {
	var what string
	switch {
	case p.rec.IsGraph() && p.call.Tool == orchestrator.GraphApprovalTool:
		what = "approval at node " + p.rec.CurrentNode
	case p.rec.IsGraph():
		what = fmt.Sprintf("approval of tool %s at node %s", p.call.Tool, p.rec.CurrentNode)
	default:
		what = "approval of tool " + p.call.Tool
	}
	switch {
	case p.waited:
		return what
	case p.rec.IsGraph():
		return what + " of run " + p.rec.ThreadID
	}
	return what + " in thread " + p.rec.ThreadID
}

// decideHint is how a person decides what thread id waits for.
func decideHint(id string) string {
	return fmt.Sprintf("spool thread approve %s (or spool thread deny %s --reason TEXT)", id, id)
}

// waitingHint says, for a wait on id that ran out of time, what id's
// tree still waits for when it is a person: "; it is waiting for
// approval at node signoff: spool thread approve R (...)"; "" otherwise.
func waitingHint(c *cli.Context, s *services, id string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Context), 5*time.Second)
	defer cancel()
	if ps := pendingBelow(ctx, s, []string{id}); len(ps) > 0 {
		return "; it is " + ps[0].notice()
	}
	if bs := budgetWaits(ctx, s, []string{id}); len(bs) > 0 {
		return "; it is " + bs[0].notice()
	}
	if as := admissionWaits(ctx, s, []string{id}); len(as) > 0 {
		return "; it is " + as[0].notice()
	}
	if ms := messageWaits(ctx, s, []string{id}); len(ms) > 0 {
		return "; it is " + messageNotice(ms[0])
	}
	return ""
}

// messageWaits are the runs of ids waiting at a wait_message node now
// for a message that has not come: one that came while the run was
// paused is taken by the wake-up its unpause enqueued, which may not
// have run yet.
func messageWaits(ctx context.Context, s *services, ids []string) []*spooltype.Record {
	var out []*spooltype.Record
	for _, id := range ids {
		rec, err := s.orch.Record(ctx, id)
		if err != nil {
			continue
		}
		if _, _, ok := orchestrator.WaitingForMessageOf(rec); !ok {
			continue
		}
		if came, err := s.orch.MessageArrived(ctx, rec); err == nil && !came {
			out = append(out, rec)
		}
	}
	return out
}

// messageNotice says what run rec waits for and how to send it: "waiting
// for message deploy_finished at node await_deploy (until T): spool graph
// send RUN deploy_finished --data JSON".
func messageNotice(rec *spooltype.Record) string {
	name, at, _ := orchestrator.WaitingForMessageOf(rec)
	until := ""
	if !at.IsZero() {
		until = " (until " + at.Format(time.RFC3339) + ")"
	}
	return fmt.Sprintf("waiting for message %s at node %s%s: spool graph send %s %s --data JSON", name, rec.CurrentNode, until, rec.ThreadID, name)
}

// admissionWait is a run admission holds for anything but its tenant's
// spend window (budgetWait says that one): a free slot of its tenant's
// share, a concurrency key, or a ceiling of its tenant's; line is where
// it stands, as `thread show` prints it.
type admissionWait struct {
	rec  *spooltype.Record
	line string
}

// admissionWaits are the runs of ids that admission holds now for
// anything but the spend window, each read live.
func admissionWaits(ctx context.Context, s *services, ids []string) []admissionWait {
	var out []admissionWait
	for _, id := range ids {
		rec, err := s.orch.Record(ctx, id)
		if err != nil || rec.Status != thread.StatusWaiting || !slices.Contains(admissionHeld, rec.WaitingFor) {
			continue
		}
		if line := s.orch.AdmissionWaitLine(ctx, rec); line != "" {
			out = append(out, admissionWait{rec: rec, line: line})
		}
	}
	return out
}

// admissionHeld are the waits admissionWaits speaks of.
var admissionHeld = []string{adm.WaitCapacity, adm.WaitConcurrency, adm.WaitTenantConcurrency, adm.WaitTenantRate, adm.WaitTenantRuns}

// notice says what a waits for and what would let it start sooner:
// "waiting for admission: concurrency per_item=x (2 of 2 running, 1st in
// line, 3 s); it starts when a run holding that key ends".
func (a admissionWait) notice() string {
	t := a.rec.TenantOrDefault()
	var next string
	switch a.rec.WaitingFor {
	case adm.WaitCapacity:
		next = "it starts when a slot of its tenant's share of the fleet frees (more workers add slots)"
	case adm.WaitConcurrency:
		next = "it starts when a run holding that key ends"
	case adm.WaitTenantConcurrency:
		next = "raise it with spool tenant set " + t + " --max-running N"
	case adm.WaitTenantRate:
		next = "raise it with spool tenant set " + t + " --starts-per-minute N"
	case adm.WaitTenantRuns:
		next = "raise it with spool tenant set " + t + " --runs-in-flight N"
	}
	return fmt.Sprintf("waiting for admission: %s; %s", a.line, next)
}

// budgetWait is a run waiting for its tenant's spend window (waiting_for
// tenant_budget), with its tenant's standing as `tenant show` reads it.
type budgetWait struct {
	rec    *spooltype.Record
	tenant *spooltype.Tenant
}

// budgetWaits are the runs of ids that wait for their tenant's spend
// window now (parked at their start, or yielded at a turn boundary),
// each read live as `thread show` reads it.
func budgetWaits(ctx context.Context, s *services, ids []string) []budgetWait {
	var out []budgetWait
	for _, id := range ids {
		rec, err := s.orch.Record(ctx, id)
		if err != nil || rec.Status != thread.StatusWaiting || rec.WaitingFor != adm.WaitTenantBudget {
			continue
		}
		t, err := s.orch.TenantStatus(ctx, rec.TenantOrDefault())
		if err != nil {
			continue
		}
		out = append(out, budgetWait{rec: rec, tenant: t})
	}
	return out
}

// notice says which of the tenant's spend windows b waits for, how full
// it is, and how to raise it: "waiting for tenant acme's spend window
// (day 1.00 of 1.00 USD spent); raise it with spool tenant set acme
// --spend-per-day USD"; what other runs hold of it is named as held
// ("day 0.60 spent + 0.40 held of 1.00 USD").
func (b budgetWait) notice() string {
	name, sp := fullWindow(b.tenant.Spend)
	var fill string
	switch {
	case sp.Limit == nil: // cleared since it parked: it starts at the next pump
		fill = fmt.Sprintf("%s %.2f USD spent, no limit now", name, sp.Spent)
	case sp.Held > 0:
		fill = fmt.Sprintf("%s %.2f spent + %.2f held of %.2f USD", name, sp.Spent, sp.Held, *sp.Limit)
	default:
		fill = fmt.Sprintf("%s %.2f of %.2f USD spent", name, sp.Spent, *sp.Limit)
	}
	t := b.tenant.Tenant
	return fmt.Sprintf("waiting for tenant %s's spend window (%s); raise it with spool tenant set %s --spend-per-%s USD", t, fill, t, name)
}

// fullWindow is the spend window (day, month) a run waiting for its
// tenant's budget waits for: the one of the two with a limit and the
// least room left, the day when they have as little.
func fullWindow(spend map[string]spooltype.TenantSpend) (string, spooltype.TenantSpend) {
	best, room := "day", math.Inf(1)
	for _, w := range []string{"day", "month"} {
		sp := spend[w]
		if sp.Limit == nil {
			continue
		}
		if r := *sp.Limit - sp.Spent - sp.Held; r < room {
			best, room = w, r
		}
	}
	return best, spend[best]
}

// graphFollowLine is --follow's line of run r (the run its chain has
// reached), what a graph run is doing rather than a thread's turns:
//
//	[demo/ship-…] waiting   node signoff (step 2 of 20) · waiting for approval · $0.000000 of $0.5
//	[demo/ship-…] running   node review (step 3 of 20) · items 2 of 8 settled · 4 children: 2 done, 2 running · $0.001440 of $0.5
//	[demo/ship-…] cancelled 2 steps · stopped at node review · 4 children: 2 done, 2 cancelled · $0.002200 of $0.5
func graphFollowLine(ctx context.Context, s *services, r *spooltype.Record) string {
	var parts []string
	switch {
	case r.Status == thread.StatusCompleted:
		parts = append(parts, thread.Count(r.Step, "step", "steps"))
	case r.Status.Terminal():
		parts = append(parts, thread.Count(r.Step, "step", "steps"))
		if r.CurrentNode != "" {
			parts = append(parts, "stopped at node "+r.CurrentNode)
		}
	case r.CurrentNode != "":
		parts = append(parts, fmt.Sprintf("node %s (step %d of %d)", r.CurrentNode, r.Step+1, r.MaxSteps))
	}
	if r.Status == thread.StatusWaiting && r.WaitingFor != "" {
		parts = append(parts, "waiting for "+strings.ReplaceAll(r.WaitingFor, "_", " "))
	}
	if r.ItemsTotal > 0 && !r.Status.Terminal() {
		parts = append(parts, fmt.Sprintf("items %d of %d settled", r.ItemsDone, r.ItemsTotal))
	}
	if kids := childProgress(ctx, s, r.ThreadID); kids != "" {
		parts = append(parts, kids)
	}
	spend, limit := runSpend(ctx, s, r)
	parts = append(parts, fmt.Sprintf("$%.6f of $%g", spend, limit))
	if r.Error != nil && r.Error.Code != string(r.Status) {
		parts = append(parts, r.Error.Code)
	}
	return fmt.Sprintf("[%s] %-9s %s", short(r), r.Status, strings.Join(parts, " · "))
}

// waited names what a wait on ids waited for: "thread ID", "run ID" (a
// graph run), "3 threads".
func waited(c *cli.Context, s *services, ids []string) string {
	if len(ids) > 1 {
		return fmt.Sprintf("%d threads", len(ids))
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Context), 5*time.Second)
	defer cancel()
	if r, err := s.orch.Record(ctx, ids[0]); err == nil && r.IsGraph() {
		return "run " + ids[0]
	}
	return "thread " + ids[0]
}

// printAwaiting prints, for thread or run r waiting for a person, each
// decision it waits for with the command that makes it, and an approval
// node's prompt as text (thread show, graph show).
func printAwaiting(ctx context.Context, w io.Writer, s *services, r *spooltype.Record) {
	if r.Status != thread.StatusWaiting || r.WaitingFor != orchestrator.WaitingForApproval {
		return
	}
	calls, err := s.orch.Approvals(ctx, r.ThreadID)
	if err != nil {
		return
	}
	for _, call := range calls {
		p := pending{call: call, rec: r, waited: true}
		fmt.Fprintf(w, "waiting    for %s: %s\n", p.what(), decideHint(r.ThreadID))
		if req, ok := orchestrator.ReadNodeRequest(call.Input); ok && r.IsGraph() && call.Tool == orchestrator.GraphApprovalTool {
			fmt.Fprintf(w, "asks       %s\n", strings.ReplaceAll(strings.TrimRight(req.Prompt, "\n"), "\n", "\n           "))
		}
	}
}
