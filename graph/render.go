package graph

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// Step statuses of a StepRecord (the step_completed event's status).
const (
	StepStatusOK    = "ok"
	StepStatusError = "error"
	StepStatusRetry = "retry"
	// StepStatusCancelled is a step in flight when its run was cancelled
	// (the run's end closes it; no step_completed says so).
	StepStatusCancelled = "cancelled"
)

// Node statuses of the node table (CLI.md: the words outside tools rely
// on).
const (
	NodeNotReached = spooltype.NodeNotReached
	NodeRunning    = spooltype.NodeRunning
	NodeWaiting    = spooltype.NodeWaiting
	NodeCompleted  = spooltype.NodeCompleted
	NodeError      = spooltype.NodeError
	NodeCancelled  = spooltype.NodeCancelled
)

// StepRecord is what the node table and the render need of one step
// (spooltype.StepRecord).
type StepRecord = spooltype.StepRecord

// NodeRow is one row of the node table, also `graph show --json`'s nodes
// (spooltype.NodeRow).
type NodeRow = spooltype.NodeRow

// Nodes builds the node table: one row per node in file order. current is
// the node in flight ("" when none) and currentStatus its status
// ("running" or "waiting"); runStatus is the run's status, and a cancelled
// run shows its in-flight node cancelled. A node's status is that of its
// last visit, its duration the time spent over all visits.
func Nodes(g *Graph, steps []StepRecord, current, currentStatus, runStatus string) []NodeRow {
	byNode := map[string][]StepRecord{}
	for _, s := range steps {
		byNode[s.Node] = append(byNode[s.Node], s)
	}
	order := g.order()
	rows := make([]NodeRow, 0, len(order))
	for i, name := range order {
		row := nodeRow(i+1, name, g.Nodes[name], byNode[name], runStatus)
		if name == current && current != "" {
			row.Status = inFlightStatus(currentStatus, runStatus)
		}
		rows = append(rows, row)
	}
	return rows
}

// nodeRow is the row of node n (named name, at index in file order) from
// its visits, the steps that ran it in order: the time over all of them,
// and the rest from the last.
func nodeRow(index int, name string, n *Node, visits []StepRecord, runStatus string) NodeRow {
	row := NodeRow{Index: index, Node: name, Kind: n.Kind, Visits: len(visits), Status: NodeNotReached}
	if n.Action != nil {
		row.Action = n.Action.String()
	}
	var total time.Duration
	for _, s := range visits {
		total += s.Duration()
		if s.Status == StepStatusRetry {
			row.Retried = true
		}
	}
	row.DurationMS = total.Milliseconds()
	if len(visits) == 0 {
		return row
	}
	last := visits[len(visits)-1]
	row.LastStep = last.Step
	if last.Action != "" {
		row.Action = last.Action
	}
	row.Status = visitStatus(last, runStatus)
	row.Routed = last.Status == StepStatusError && (last.RoutedBy == "on_error" || last.RoutedBy == "continue")
	row.Children = children(n, last)
	row.Detail = detail(last)
	row.Run = last.Run
	return row
}

// inFlightStatus is the status of the node in flight: cancelled with its
// run, else waiting or running as the run says.
func inFlightStatus(currentStatus, runStatus string) string {
	switch {
	case runStatus == NodeCancelled:
		return NodeCancelled
	case currentStatus == NodeWaiting:
		return NodeWaiting
	}
	return NodeRunning
}

// visitStatus maps a step's status to the node's.
func visitStatus(s StepRecord, runStatus string) string {
	switch s.Status {
	case StepStatusOK:
		return NodeCompleted
	case StepStatusError:
		return NodeError
	case StepStatusCancelled:
		return NodeCancelled
	}
	// in flight, or retried with the next attempt not recorded yet
	switch runStatus {
	case NodeCancelled:
		return NodeCancelled
	case NodeError, NodeCompleted:
		return NodeError
	}
	return NodeRunning
}

// children is a node's children column: for a foreach or a wait, its
// items that succeeded of all ("2/8 done"; detail counts the others),
// else the ids of its children.
func children(n *Node, s StepRecord) string {
	if s.ItemsTotal > 0 || n.Kind == KindForeach || n.Kind == KindWait {
		if s.ItemsTotal == 0 && s.ItemsDone == 0 {
			return ""
		}
		return fmt.Sprintf("%d/%d done", s.ItemsSucceeded(), s.ItemsTotal)
	}
	return strings.Join(s.ThreadIDs, ", ")
}

func detail(s StepRecord) string {
	var parts []string
	if s.Error != "" {
		parts = append(parts, clip(oneLine(s.Error), 80))
	}
	parts = append(parts, itemCounts(s)...)
	if len(s.Assigned) > 0 {
		plus := make([]string, len(s.Assigned))
		for i, k := range s.Assigned {
			plus[i] = "+" + k
		}
		parts = append(parts, strings.Join(plus, " "))
	}
	for _, u := range s.Unresolved {
		parts = append(parts, "null "+u)
	}
	if s.Run != "" {
		parts = append(parts, "in run "+s.Run)
	}
	return strings.Join(parts, "; ")
}

// itemCounts are the counts of a step's items that did not succeed:
// "1 failed", "2 cancelled", "4 not started" (each when there are any).
func itemCounts(s StepRecord) []string {
	var parts []string
	for _, c := range []struct {
		n    int
		what string
	}{{s.ItemsFailed, "failed"}, {s.ItemsCancelled, "cancelled"}, {s.ItemsNotStarted(), "not started"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	return parts
}

// RunInfo is what the render shows about the run as a whole.
type RunInfo struct {
	RunID, Graph, Digest, Status, CurrentNode string
	Step                                      int
	StartedAt                                 time.Time
	Duration                                  time.Duration
	Spend                                     float64
	SuppressedErrors                          int
}

// Render writes the run's knowledge render (11.2): frontmatter, the node
// table, the step history and a footer. rows is Nodes' table.
func Render(g *Graph, info RunInfo, steps []StepRecord, rows []NodeRow) []byte {
	var b bytes.Buffer
	renderFront(&b, info)
	renderTitle(&b, g, info)
	renderNodeTable(&b, rows)
	b.WriteString("\n## Steps\n")
	if len(steps) == 0 {
		b.WriteString("\nNo step has run yet.\n")
	}
	for _, s := range steps {
		renderStep(&b, g, s)
	}
	renderFooter(&b, info)
	return b.Bytes()
}

// renderFront writes the frontmatter: the run's fields, one per line, for
// tools that read the render as a knowledge entry.
func renderFront(b *bytes.Buffer, info RunInfo) {
	b.WriteString("---\n")
	front := []struct {
		k string
		v any
	}{
		{"run_id", info.RunID},
		{"graph", info.Graph},
		{"graph_digest", info.Digest},
		{"status", info.Status},
		{"step", info.Step},
		{"current_node", info.CurrentNode},
		{"started_at", info.StartedAt.UTC().Format(time.RFC3339)},
		{"duration", fmtElapsed(info.Duration)},
		{"spend", info.Spend},
		{"suppressed_errors", info.SuppressedErrors},
		{"entry_type", "graph_transcript"},
	}
	for _, f := range front {
		fmt.Fprintf(b, "%s: %s\n", f.k, yamlScalar(f.v))
	}
	b.WriteString("---\n\n")
}

// renderTitle writes the heading (the graph's name from the run, else
// from the graph) and the graph's description.
func renderTitle(b *bytes.Buffer, g *Graph, info RunInfo) {
	title := info.Graph
	if title == "" && g != nil {
		title = g.Name
	}
	fmt.Fprintf(b, "# Graph %s: run %s\n\n", title, info.RunID)
	if g != nil && g.Description != "" {
		b.WriteString(oneLine(g.Description) + "\n\n")
	}
}

// renderNodeTable writes the node table, one row per node.
func renderNodeTable(b *bytes.Buffer, rows []NodeRow) {
	b.WriteString("## Nodes\n\n")
	b.WriteString("| # | node | kind | status | visits | last step | duration | action | children | detail |\n")
	b.WriteString("|---|------|------|--------|--------|-----------|----------|--------|----------|--------|\n")
	for _, r := range rows {
		last, dur := "", ""
		if r.LastStep > 0 {
			last = strconv.Itoa(r.LastStep)
		}
		if r.Visits > 0 && r.DurationMS > 0 {
			dur = fmtElapsed(time.Duration(r.DurationMS) * time.Millisecond)
		}
		fmt.Fprintf(b, "| %d | %s | %s | %s | %d | %s | %s | %s | %s | %s |\n",
			r.Index, cell(r.Node), cell(r.Kind), r.Icon(), r.Visits, last, dur, cell(r.Action), cell(r.Children), cell(r.Detail))
	}
}

// renderStep writes one step of the history: its heading, then a line
// for each thing the step recorded (an empty one is left out).
func renderStep(b *bytes.Buffer, g *Graph, s StepRecord) {
	status := s.Status
	if status == "" {
		status = "in flight"
	}
	in := ""
	if s.Run != "" {
		in = " in run " + s.Run
	}
	fmt.Fprintf(b, "\n### Step %d: %s (%s), %s%s\n\n", s.Step, s.Node, s.Kind, status, in)
	if action := stepAction(g, s); action != "" {
		fmt.Fprintf(b, "- action: %s\n", oneLine(action))
	}
	if !s.Started.IsZero() {
		fmt.Fprintf(b, "- started: %s\n", s.Started.UTC().Format(time.RFC3339))
	}
	if d := s.Duration(); d > 0 {
		fmt.Fprintf(b, "- elapsed: %s\n", fmtElapsed(d))
	}
	if s.ItemsTotal > 0 {
		fmt.Fprintf(b, "- items: %d/%d done, %d failed", s.ItemsSucceeded(), s.ItemsTotal, s.ItemsFailed)
		if s.ItemsCancelled > 0 {
			fmt.Fprintf(b, ", %d cancelled", s.ItemsCancelled)
		}
		if n := s.ItemsNotStarted(); n > 0 {
			fmt.Fprintf(b, ", %d not started", n)
		}
		b.WriteString("\n")
	}
	if len(s.ThreadIDs) > 0 {
		fmt.Fprintf(b, "- children: %s\n", strings.Join(s.ThreadIDs, ", "))
	}
	if s.Error != "" {
		fmt.Fprintf(b, "- error: %s\n", oneLine(s.Error))
	}
	if s.Status != "" {
		fmt.Fprintf(b, "- next: %s\n", stepEdge(s))
	}
	if len(s.Assigned) > 0 {
		fmt.Fprintf(b, "- assigned: %s\n", strings.Join(s.Assigned, ", "))
	}
	for _, u := range s.Unresolved {
		fmt.Fprintf(b, "- assigned null: %s\n", u)
	}
}

// stepAction is the action a step ran: as the step recorded it
// (interpolated), else as the graph's node writes it.
func stepAction(g *Graph, s StepRecord) string {
	if s.Action != "" || g == nil {
		return s.Action
	}
	if n := g.Nodes[s.Node]; n != nil && n.Action != nil {
		return n.Action.String()
	}
	return ""
}

// stepEdge is where a finished step went ("(end)" when the run ended
// there) and what chose the edge.
func stepEdge(s StepRecord) string {
	edge := s.NextNode
	if edge == "" {
		edge = "(end)"
	}
	if s.RoutedBy != "" {
		edge += " (" + s.RoutedBy + ")"
	}
	return edge
}

// renderFooter writes the closing line: the run's status (with the errors
// a completed run suppressed), steps, time and spend.
func renderFooter(b *bytes.Buffer, info RunInfo) {
	status := info.Status
	if status == "completed" && info.SuppressedErrors > 0 {
		status = "completed (" + thread.Count(info.SuppressedErrors, "error", "errors") + " suppressed)"
	}
	fmt.Fprintf(b, "\n---\n\n**%s** · %s · %s · $%s\n", status, thread.Count(info.Step, "step", "steps"), fmtElapsed(info.Duration),
		strconv.FormatFloat(info.Spend, 'f', 4, 64))
}

// yamlScalar writes a frontmatter value: numbers as they are, text as a
// JSON string (which YAML reads as a double-quoted scalar).
func yamlScalar(v any) string {
	switch x := v.(type) {
	case int:
		return strconv.Itoa(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case string:
		b, _ := json.Marshal(x)
		return string(b)
	}
	return fmt.Sprint(v)
}

// cell escapes a markdown table cell.
func cell(s string) string {
	s = oneLine(s)
	return strings.ReplaceAll(s, "|", `\|`)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// fmtElapsed writes a duration for people: "0.4s", "41s", "2m5s".
func fmtElapsed(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds()))
	}
	return formatDuration(d.Round(time.Second))
}
