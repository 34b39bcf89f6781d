package spooltype

import "github.com/spool-run/spool/thread"

// TreeNode is a thread in a tree: its children, and the thread that
// continues it. It is what `spool thread tree --json`, the monitor's
// thread page and the API's tree route show.
type TreeNode struct {
	ThreadID   string        `json:"thread_id"`
	Directive  string        `json:"directive"`
	Status     thread.Status `json:"status"`
	Model      string        `json:"model,omitempty"`
	Turns      int           `json:"turns"`
	Tokens     int           `json:"tokens"`
	Spend      float64       `json:"spend"`
	SpendLimit float64       `json:"spend_limit"`
	// Subtree is the live spend of the thread's subtree against its
	// ceiling, on the first thread of each continuation chain (the chain
	// shares one ledger entry).
	Subtree      *Subtree    `json:"subtree,omitempty"`
	Children     []*TreeNode `json:"children"`
	Continuation *TreeNode   `json:"continuation,omitempty"`
	// ForkedFrom and ForkTurn: the thread is a fork of ForkedFrom at that
	// turn (`spool thread fork`). Forks are the threads forked from this
	// one, each the first of a chain of its own (a fork of a child is also
	// its parent's child, shown here and not among the parent's children).
	ForkedFrom string      `json:"forked_from,omitempty"`
	ForkTurn   int         `json:"fork_turn,omitempty"`
	Forks      []*TreeNode `json:"forks,omitempty"`
	// Truncated: the walk stopped at its node limit below here.
	Truncated bool `json:"truncated,omitempty"`
	// Kind is "graph" for a graph run ("thread" otherwise); a run's
	// CurrentNode and Step are its cursor (Record), and a
	// graph fork's ForkTurn is the step it was forked at.
	Kind        string `json:"kind,omitempty"`
	CurrentNode string `json:"current_node,omitempty"`
	Step        int    `json:"step,omitempty"`
	// DroppedCapabilities are what the thread's directive asks for that
	// its parent does not hold (Record): it runs without them.
	DroppedCapabilities []string `json:"dropped_capabilities,omitempty"`
}

// Live reports whether any thread of the tree has not finished.
func (n *TreeNode) Live() bool {
	if n == nil {
		return false
	}
	if !n.Status.Terminal() {
		return true
	}
	for _, k := range n.Children {
		if k.Live() {
			return true
		}
	}
	return n.Continuation.Live()
}
