package spooltype

// Budget is the live budget of a thread's subtree: its chain's ledger
// entry (one per continuation chain, ledger package doc), what the
// subtree can spend now, and its children's entries. It is what `spool
// budget show` prints and the monitor's budget card draws, so the two and
// the ledger's spend_exceeded messages say the same.
type Budget struct {
	// ThreadID is the thread asked about; LedgerID its chain's entry.
	ThreadID string `json:"thread_id"`
	LedgerID string `json:"ledger_id"`
	// ParentID is the parent's entry; null for a root.
	ParentID *string `json:"parent_id"`
	// Max is the subtree's ceiling; Actual the subtree's spend so far
	// (live: the chain's own turns and every descendant's); Own the
	// chain's own turns; Reserved what is set aside for guaranteed
	// descendants; Remaining Max − Actual − Reserved.
	Max       float64 `json:"max"`
	Actual    float64 `json:"actual"`
	Own       float64 `json:"own"`
	Reserved  float64 `json:"reserved"`
	Remaining float64 `json:"remaining"`
	Overrun   float64 `json:"overrun"`
	// Available is what the subtree can spend now: Remaining, or less
	// when an ancestor has less room (LimitedBy names the level).
	Available  float64 `json:"available"`
	LimitedBy  string  `json:"limited_by"`
	Status     string  `json:"status"`
	Guaranteed bool    `json:"guaranteed"`
	// Children are the entries of the children of every thread of the
	// chain.
	Children []BudgetChild `json:"children"`
}

// BudgetChild is a child's entry as its parent sees it.
type BudgetChild struct {
	ThreadID   string  `json:"thread_id"`
	Directive  string  `json:"directive"`
	Max        float64 `json:"max"`
	Actual     float64 `json:"actual"`
	Own        float64 `json:"own"`
	Reserved   float64 `json:"reserved"`
	Remaining  float64 `json:"remaining"`
	Status     string  `json:"status"`
	Guaranteed bool    `json:"guaranteed"`
}

// Percent returns v as a share of Max, 0 to 100.
func (b *Budget) Percent(v float64) float64 {
	if b.Max <= 0 {
		return 0
	}
	return min(100, max(0, v/b.Max*100))
}

// Subtree is the live spend of a chain's subtree against its ceiling,
// for tree views.
type Subtree struct {
	Spent float64 `json:"spent"`
	Max   float64 `json:"max"`
}
