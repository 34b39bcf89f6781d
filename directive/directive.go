package directive

import (
	"fmt"

	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/thread"
)

// Directive is a parsed directive file.
type Directive struct {
	// Name and Version from <directive name version>.
	Name    string
	Version string
	// Path is the file the directive was parsed from (as given to Parse).
	Path string
	// Signature is the signature comment line, "" if unsigned.
	Signature string
	// Body is the Markdown before the xml fence, trimmed.
	Body string
	// Prompt is the whole file minus the signature line: what the model
	// is given (after RenderBody).
	Prompt string

	Description string
	Category    string
	Author      string
	Model       Model
	// Limits are the directive's limit layer; unset attributes are nil.
	Limits thread.Limits
	// Permissions are the capability strings the directive asks for,
	// normalised ("/" written as "."), in document order without
	// duplicates.
	Permissions []string
	// PermissionsDeclared is true when a <permissions> element (or a
	// legacy <cap>) appears, even if it grants nothing. Without one the
	// directive has no capabilities (fail closed).
	PermissionsDeclared bool
	Inputs              []Input
	Process             []Step
	Outputs             Outputs
	// Hooks are the directive's hooks (layer 1), in document order.
	Hooks []hooks.Hook
	// Continuation names the directive that seeds this directive's
	// continuation threads ("" means the system default,
	// DefaultContinuation). Written <continuation directive="x"/> or
	// <continuation>x</continuation> in <metadata>.
	Continuation string
}

// Model is the directive's model choice. ID wins over Tier.
type Model struct {
	Tier       string
	ID         string
	Fallback   string // a tier
	FallbackID string
}

// Input is a declared input.
type Input struct {
	Name        string
	Type        string // string, integer, number, boolean, object or array
	Required    bool
	Default     *string // the default="" attribute, nil when absent
	Description string
}

// Step is one <process> step: guidance for the model.
type Step struct {
	Name        string
	Description string
	Actions     []StepAction
}

// StepAction is an <execute>, <load> or <search> inside a step.
type StepAction struct {
	Primary  string
	ItemType string
	ItemID   string
	Params   map[string]string
}

// Outputs are the directive's declared outputs.
type Outputs struct {
	// Fields are declared <output name required> fields; when any are
	// declared the model finishes by calling directive_return with them.
	Fields []OutputField
	// Success and Failure are the free-text <success> and <failure>.
	Success string
	Failure string
	// Text is any other free text directly inside <outputs>.
	Text string
}

// OutputField is one declared output.
type OutputField struct {
	Name        string
	Required    bool
	Description string
}

// Input returns the declared input named name.
func (d *Directive) Input(name string) (Input, bool) {
	for _, in := range d.Inputs {
		if in.Name == name {
			return in, true
		}
	}
	return Input{}, false
}

// MissingOutputs returns the required declared outputs absent from got.
func (d *Directive) MissingOutputs(got map[string]any) []string {
	var missing []string
	for _, f := range d.Outputs.Fields {
		if _, ok := got[f.Name]; f.Required && !ok {
			missing = append(missing, f.Name)
		}
	}
	return missing
}

// ParseError is a directive syntax or content error. Error() reads
// "file:line: <element attr="value">: message".
type ParseError struct {
	Path string
	Line int
	Elem string // e.g. `<limits spend="abc">`, "" when not about an element
	Msg  string
}

func (e *ParseError) Error() string {
	s := e.Path
	if e.Line > 0 {
		s += fmt.Sprintf(":%d", e.Line)
	}
	if e.Elem != "" {
		s += ": " + e.Elem
	}
	return s + ": " + e.Msg
}
