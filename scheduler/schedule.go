package scheduler

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"gopkg.in/yaml.v3"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/thread"
)

// SchedulesPath is where a project keeps its schedules, relative to the
// project root.
const SchedulesPath = ".ai/config/schedules.yaml"

// Entry is one cron-scheduled directive (or graph) of schedules.yaml.
type Entry struct {
	// ID names the entry; it is part of the tick lock and of the thread ids
	// the entry starts, so renaming an entry makes its ticks new ones.
	// Letters, digits, '.', '_' and '-'.
	ID string
	// Directive is the directive to run ("demo/hello"), or, when Graph,
	// the graph whose run the entry starts ("review/nightly": an entry's
	// graph: key).
	Directive string
	// Graph: the entry names a graph (graph: instead of directive:), and
	// each tick starts a graph run of it.
	Graph bool
	// MaxSteps overrides a graph's max_steps (limits: {max_steps: N}).
	MaxSteps int
	// Inputs are the directive's inputs.
	Inputs map[string]any
	// Cron is the schedule: a 5-field spec ("*/5 * * * *", UTC unless
	// prefixed with CRON_TZ=Area/City), a descriptor (@hourly, @daily,
	// @weekly, @monthly, @yearly, @midnight) or "@every <duration>" (at
	// least 1s; ticks are aligned to multiples of the duration since the
	// Unix epoch, so every process computes the same ticks).
	Cron string
	// Queue is the asynq queue of the thread. Default "default".
	Queue string
	// Model overrides the directive's model (a model id or script:PATH).
	Model string
	// Limits override the directive's limits.
	Limits thread.Limits
	// Tenant is the tenant the entry's runs are for ("": the default
	// tenant) and Priority their priority, 1 (highest) to 5 (0: the
	// tenant's default).
	Tenant   string
	Priority int
	// Tags label each run the entry starts (and its tree).
	Tags map[string]string
	// Notify is a URL told of each run's events (--notify).
	Notify string

	schedule cron.Schedule
}

// Next returns the entry's first tick strictly after t.
func (e *Entry) Next(t time.Time) time.Time { return e.schedule.Next(t) }

// Interval is the time between the tick after t and the one after that:
// the period of an @every entry, the gap at t of a cron spec.
func (e *Entry) Interval(t time.Time) time.Duration {
	n := e.schedule.Next(t)
	return e.schedule.Next(n).Sub(n)
}

var (
	entryIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	cronParser     = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	entryKeys      = map[string]bool{"id": true, "directive": true, "graph": true, "inputs": true, "cron": true, "queue": true, "model": true, "limits": true,
		"tenant": true, "priority": true, "tags": true, "notify": true}
)

// LoadFile reads a schedules file. A missing file is (nil, err) with
// errors.Is(err, fs.ErrNotExist).
func LoadFile(path string) ([]Entry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Load reads the project's .ai/config/schedules.yaml; a project without
// one has no entries.
func Load(projectDir string) ([]Entry, error) {
	entries, err := LoadFile(filepath.Join(projectDir, SchedulesPath))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return entries, err
}

// Parse parses a schedules file. The entries sit under a top-level
// "schedules:" key (or the document is the list itself):
//
//	schedules:
//	  - id: nightly-report
//	    directive: reports/nightly
//	    cron: "0 3 * * *"
//	    inputs: {scope: all}
//	    queue: low
//	    model: claude-haiku-4-5
//	    limits: {turns: 10, spend: 0.5}
//	    tenant: acme                   # whose run it is (default: default)
//	    priority: 2                    # 1 (highest) .. 5 (default: the tenant's)
//	    tags: {team: reports}          # labels of every run it starts
//	  - id: nightly-review
//	    graph: review/nightly          # a graph run instead of a thread
//	    cron: "0 4 * * *"
//	    limits: {spend: 2, max_steps: 50}
//
// Every problem is one line naming the file, the entry and its line:
// `schedules.yaml:4: entry "nightly-report": cron "0 3 * *": expected
// exactly 5 fields, found 4: [0 3 * *]`. Unknown keys are errors, so that
// a typo does not silently drop a setting.
func Parse(path string, data []byte) ([]Entry, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %s", path, oneLine(err.Error()))
	}
	if len(doc.Content) == 0 {
		return nil, nil // empty file
	}
	root := doc.Content[0]
	list := root
	if root.Kind == yaml.MappingNode {
		list = nil
		for i := 0; i+1 < len(root.Content); i += 2 {
			k, v := root.Content[i], root.Content[i+1]
			if k.Value != "schedules" {
				return nil, fmt.Errorf("%s:%d: unknown key %q (want schedules: [...])", path, k.Line, k.Value)
			}
			list = v
		}
		if list == nil || list.Tag == "!!null" {
			return nil, nil
		}
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s:%d: schedules must be a list of entries", path, list.Line)
	}
	var out []Entry
	seen := map[string]int{}
	for i, n := range list.Content {
		e, err := parseEntry(n)
		if err != nil {
			where := fmt.Sprintf("schedules[%d]", i)
			if e.ID != "" {
				where = fmt.Sprintf("entry %q", e.ID)
			}
			return nil, fmt.Errorf("%s:%d: %s: %w", path, n.Line, where, err)
		}
		if line, dup := seen[e.ID]; dup {
			return nil, fmt.Errorf("%s:%d: entry %q: duplicate id (first at line %d)", path, n.Line, e.ID, line)
		}
		seen[e.ID] = n.Line
		out = append(out, e)
	}
	return out, nil
}

// parseEntry decodes and validates one entry; the returned Entry carries
// the id (when readable) even on error, for the message.
func parseEntry(n *yaml.Node) (Entry, error) {
	var e Entry
	if n.Kind != yaml.MappingNode {
		return e, errors.New("an entry must be a mapping (id, directive, cron, ...)")
	}
	r, err := e.readKeys(n)
	if err != nil {
		return e, err
	}
	if err := e.checkID(); err != nil {
		return e, err
	}
	if err := e.target(r.graph); err != nil {
		return e, err
	}
	if err := e.parseCron(); err != nil {
		return e, err
	}
	if e.Queue != "" && orchestrator.CheckQueueName(e.Queue) != nil {
		return e, fmt.Errorf("queue %q: not a queue name", e.Queue)
	}
	if r.limits != nil {
		if e.Limits, e.MaxSteps, err = parseLimits(r.limits, e.Graph); err != nil {
			return e, fmt.Errorf("limits: %w", err)
		}
	}
	return e, e.admission(r.priority)
}

// admission checks the entry's tenant and reads its priority (the text
// of its priority: key, "" when none), as a start checks them.
func (e *Entry) admission(priority string) error {
	if e.Tenant != "" && thread.CheckTenant(e.Tenant) != nil {
		return fmt.Errorf("tenant %q: want 1 to 63 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit", e.Tenant)
	}
	if priority == "" {
		return nil
	}
	p, err := strconv.Atoi(priority)
	if err != nil || thread.CheckPriority(p) != nil {
		return fmt.Errorf("priority %q: want a whole number from %d (highest) to %d", priority, thread.MinPriority, thread.MaxPriority)
	}
	e.Priority = p
	return nil
}

// readTags reads an entry's tags: a mapping of keys to string values,
// checked as a start checks them.
func (e *Entry) readTags(v *yaml.Node) error {
	if v.Kind != yaml.MappingNode {
		return errors.New("must be a mapping of keys to values")
	}
	if err := v.Decode(&e.Tags); err != nil {
		return errors.New(oneLine(err.Error()))
	}
	return thread.CheckTags(e.Tags)
}

// entryKeysRead holds the keys of an entry that parseEntry settles only
// once every key is read: the graph (which excludes directive) and the
// limits (whose max_steps only a graph entry may set).
type entryKeysRead struct {
	graph    string
	limits   *yaml.Node
	priority string
}

// readKeys reads the keys of the entry mapping n into e, in their order,
// stopping at the first unknown or malformed one.
func (e *Entry) readKeys(n *yaml.Node) (entryKeysRead, error) {
	var r entryKeysRead
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !entryKeys[k.Value] {
			return r, fmt.Errorf("unknown key %q (id, directive or graph, cron, inputs, queue, model, limits, tenant, priority, tags)", k.Value)
		}
		if err := e.readKey(&r, k.Value, v); err != nil {
			return r, err
		}
	}
	return r, nil
}

// readKey reads the value v of the known key into e, or into r when it
// must wait for the others. Its errors name the key.
func (e *Entry) readKey(r *entryKeysRead, key string, v *yaml.Node) error {
	var err error
	scalars := map[string]*string{"id": &e.ID, "directive": &e.Directive, "graph": &r.graph, "cron": &e.Cron,
		"queue": &e.Queue, "model": &e.Model, "tenant": &e.Tenant, "priority": &r.priority, "notify": &e.Notify}
	if to, ok := scalars[key]; ok {
		err = scalar(v, to)
	}
	switch key {
	case "tags":
		err = e.readTags(v)
	case "notify":
		if err == nil && e.Notify != "" {
			err = config.CheckWebhookURL(e.Notify)
		}
	case "inputs":
		if v.Kind != yaml.MappingNode && v.Tag != "!!null" {
			return errors.New("inputs: must be a mapping of input names to values")
		}
		if err = v.Decode(&e.Inputs); err != nil {
			err = fmt.Errorf("inputs: %s", oneLine(err.Error()))
		}
	case "limits":
		r.limits = v
	}
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// checkID requires the entry's id and checks its spelling; a misspelt id
// is cleared, so that the error is not placed under it.
func (e *Entry) checkID() error {
	if e.ID == "" {
		return errors.New("id: required")
	}
	if !entryIDPattern.MatchString(e.ID) {
		id := e.ID
		e.ID = ""
		return fmt.Errorf("id %q: use letters, digits, '.', '_' and '-' (at most 128)", id)
	}
	return nil
}

// target settles what the entry's ticks start: a run of the graph
// graphName, or a thread of e.Directive (exactly one of them), with the
// name cleaned. A graph entry may not name a model.
func (e *Entry) target(graphName string) error {
	switch {
	case graphName != "" && e.Directive != "":
		return errors.New("directive and graph: name one of them (a thread of a directive, or a run of a graph)")
	case graphName != "":
		name, err := orchestrator.GraphName(graphName)
		if err != nil {
			return fmt.Errorf("graph %q: %s", graphName, oneLine(err.Error()))
		}
		if e.Model != "" {
			return errors.New("model: a graph run calls no model (its directives name theirs)")
		}
		e.Directive, e.Graph = name, true
	case e.Directive == "":
		return errors.New("directive: required (or graph: for a graph run)")
	default:
		name, err := directive.CleanName(e.Directive)
		if err != nil {
			return fmt.Errorf("directive %q: %s", e.Directive, oneLine(err.Error()))
		}
		e.Directive = name
	}
	return nil
}

// parseCron requires the entry's cron and parses it into its schedule,
// which must fire at least once more.
func (e *Entry) parseCron() error {
	if e.Cron == "" {
		return errors.New("cron: required (a 5-field spec, @hourly, @every 30s, ...)")
	}
	var err error
	if e.schedule, err = ParseSpec(e.Cron); err != nil {
		return fmt.Errorf("cron %q: %s", e.Cron, oneLine(err.Error()))
	}
	if e.schedule.Next(time.Now()).IsZero() {
		return fmt.Errorf("cron %q: never fires", e.Cron)
	}
	return nil
}

func scalar(v *yaml.Node, dst *string) error {
	if v.Kind != yaml.ScalarNode {
		return errors.New("must be a string")
	}
	*dst = strings.TrimSpace(v.Value)
	return nil
}

// parseLimits reads an entry's limits; a graph's may hold max_steps.
func parseLimits(n *yaml.Node, graphEntry bool) (thread.Limits, int, error) {
	var l thread.Limits
	maxSteps := 0
	if n.Kind != yaml.MappingNode {
		return l, 0, fmt.Errorf("must be a mapping (%s)", strings.Join(thread.LimitNames, ", "))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if v.Kind != yaml.ScalarNode {
			return l, 0, fmt.Errorf("%s: not a number", k.Value)
		}
		if k.Value == "max_steps" && graphEntry {
			m, err := strconv.Atoi(v.Value)
			if err != nil || m < 1 || m > graph.MaxStepsCap {
				return l, 0, fmt.Errorf("max_steps %q: want a whole number from 1 to %d", v.Value, graph.MaxStepsCap)
			}
			maxSteps = m
			continue
		}
		if err := l.SetLimit(k.Value, v.Value); err != nil {
			return l, 0, err
		}
	}
	return l, maxSteps, nil
}

// ParseSpec parses a schedule (see Entry.Cron). Cron specs without a
// CRON_TZ= or TZ= prefix are in UTC, whatever the machine's zone, so that
// every scheduler process computes the same ticks.
func ParseSpec(spec string) (cron.Schedule, error) {
	spec = strings.TrimSpace(spec)
	if rest, ok := strings.CutPrefix(spec, "@every"); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return nil, fmt.Errorf("@every: %w", err)
		}
		if d < time.Second {
			return nil, fmt.Errorf("@every %s: the interval must be at least 1s", d)
		}
		return Every(d), nil
	}
	s, err := cronParser.Parse(spec)
	if err != nil {
		return nil, err
	}
	if ss, ok := s.(*cron.SpecSchedule); ok && !strings.HasPrefix(spec, "CRON_TZ=") && !strings.HasPrefix(spec, "TZ=") {
		ss.Location = time.UTC
	}
	return s, nil
}

// Every is an interval schedule aligned to the Unix epoch: its ticks are
// the multiples of the interval, so two processes started at different
// moments tick at the same instants (robfig/cron's @every counts from
// each process's start, which two processes cannot agree on).
type Every time.Duration

// Next returns the first multiple of the interval strictly after t.
func (e Every) Next(t time.Time) time.Time {
	d := int64(e)
	n := t.UnixNano()
	next := (n/d + 1) * d
	if n < 0 && n%d != 0 {
		next -= d
	}
	return time.Unix(0, next).In(t.Location())
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "yaml: ")
	s = strings.ReplaceAll(s, "unmarshal errors:\n", "")
	return strings.Join(strings.Fields(s), " ")
}
