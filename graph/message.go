package graph

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// A wait_message node (section 4.8) waits for a message sent to the run
// by name. Its result is {name, data, sent_at, id}; when its timeout
// passes first, the result is {timed_out: true} and the run takes
// on_timeout (a node), or fails wait_timeout when the node has none.
// Several nodes may take the same name; data sent under a name must
// meet the schema of every node that takes it.

// CodeWaitTimeout is the step failure of a wait_message node whose
// timeout passed with no message, when it names no on_timeout node.
const CodeWaitTimeout = "wait_timeout"

// messageNameRe is what a message name may be.
var messageNameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// ValidMessageName reports whether name may name a message.
func ValidMessageName(name string) bool { return messageNameRe.MatchString(name) }

// TimeoutNode is the node a wait_message node routes to when its
// timeout passes: "" for other kinds, and when it names none.
func (n *Node) TimeoutNode() string {
	if n == nil || n.Kind != KindWaitMessage {
		return ""
	}
	return n.OnTimeout
}

// TimedOut reports whether result is a wait_message step's result on
// timeout ({timed_out: true}).
func TimedOut(result any) bool {
	m, ok := result.(map[string]any)
	return ok && m["timed_out"] == true
}

// MessageNames are the names of the messages g's wait_message nodes
// take, sorted, each once.
func (g *Graph) MessageNames() []string {
	seen := map[string]bool{}
	var out []string
	for _, name := range g.Order {
		n := g.Nodes[name]
		if n.Kind == KindWaitMessage && n.Message != "" && !seen[n.Message] {
			seen[n.Message] = true
			out = append(out, n.Message)
		}
	}
	sort.Strings(out)
	return out
}

// MessageError says why g's run cannot take a message: its name is not
// one the graph waits for, or its data fails a node's schema.
type MessageError struct {
	Code    string // message_unknown, message_invalid
	Message string
}

func (e *MessageError) Error() string { return e.Message }

// Message codes.
const (
	CodeMessageUnknown = "message_unknown"
	CodeMessageInvalid = "message_invalid"
)

// CheckMessage checks a message named name, with data, against g: some
// wait_message node must take the name, and data must meet the schema of
// each that does. It returns the data as the run will see it (a copy,
// with the schemas' defaults).
func (g *Graph) CheckMessage(name string, data any) (any, error) {
	var nodes []*Node
	for _, nn := range g.Order {
		if n := g.Nodes[nn]; n.Kind == KindWaitMessage && n.Message == name {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		msg := fmt.Sprintf("graph %s has no wait_message node named %q", g.Name, name)
		if names := g.MessageNames(); len(names) > 0 {
			msg += " (it waits for: " + strings.Join(names, ", ") + ")"
		} else {
			msg += " (it waits for no message)"
		}
		return nil, &MessageError{Code: CodeMessageUnknown, Message: msg}
	}
	out := DeepCopy(data)
	for _, n := range nodes {
		if n.MessageSchema == nil {
			continue
		}
		var probs []Diagnostic
		v, err := n.MessageSchema.validate(out, "data", &probs)
		if err != nil {
			probs = append(probs, Diagnostic{Key: "data", Message: err.Error()})
		}
		if len(probs) > 0 {
			sort.SliceStable(probs, func(i, j int) bool { return probs[i].Key < probs[j].Key })
			parts := make([]string, len(probs))
			for i, d := range probs {
				parts[i] = d.String()
			}
			return nil, &MessageError{Code: CodeMessageInvalid, Message: fmt.Sprintf("message %s fails the schema of node %s: %s", name, n.Name, strings.Join(parts, "; "))}
		}
		out = v
	}
	return out, nil
}

// waitMessage checks a wait_message node: the name it takes, its schema
// (read by Parse), and on_timeout, a node.
func (v *validator) waitMessage(n *Node) {
	name := n.Name
	switch {
	case n.Message == "":
		v.errorf(name, "name", "missing: a wait_message node takes the messages of one name (name: deploy_finished)")
	case !ValidMessageName(n.Message):
		v.errorf(name, "name", "%q is not a message name: letters, digits, _, . and -, at most 64", n.Message)
	}
	if n.OnTimeout != "" && v.g.Nodes[n.OnTimeout] == nil {
		v.errorf(name, "on_timeout", "%s", v.unknownNode(n.OnTimeout))
	}
	if n.OnTimeout != "" && n.Timeout == 0 {
		v.warnf(name, "on_timeout", "the node has no timeout: it waits for its message for ever, and on_timeout is never taken")
	}
}
