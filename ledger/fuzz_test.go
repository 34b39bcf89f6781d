package ledger

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Kinds of generated ops.
const (
	opAdmit   = iota // admit node under parent with max amt
	opReserve        // reserve amt for node under parent (guaranteed)
	opCharge         // charge amt to node under key
	opReport         // report node's absolute spend
	opRelease        // release node
	opReopen         // admit node again with reopen (a resume)
	opRetry          // charge again under an earlier key (same as opCharge)
	opKinds
)

// op is one step of a generated ledger sequence.
type op struct {
	kind   int
	node   int // the thread the op is about
	parent int // for admit and reserve
	amt    int64
	key    string
}

func nodeID(i int) string { return fmt.Sprintf("n%d", i) }

// decodeOps turns fuzz bytes into a sequence over up to 16 threads; node 0
// is the root with budget rootMax. Every 4 bytes make one op.
func decodeOps(data []byte) (rootMax int64, ops []op) {
	rootMax = 1000
	if len(data) > 0 {
		rootMax = int64(data[0])*50 + 1
		data = data[1:]
	}
	for i := 0; i+4 <= len(data) && len(ops) < 400; i += 4 {
		b := data[i : i+4]
		o := op{kind: int(b[0]) % opKinds, node: int(b[1]) % 16, amt: int64(b[2]) * int64(b[3]%8+1)}
		o.parent = int(b[3]) % 16
		o.key = fmt.Sprintf("k%d", b[2]%8)
		ops = append(ops, o)
	}
	return rootMax, ops
}

// modelRun runs a decoded sequence on the model, checking the invariants
// after every op, then releases every active thread and checks the end
// state: the root has every accepted charge and no reservation left.
func modelRun(t testing.TB, rootMax int64, ops []op) {
	m := newModel()
	require.NoError(t, m.register(nodeID(0), rootMax))
	for i, o := range ops {
		id := nodeID(o.node)
		switch o.kind {
		case opAdmit:
			if o.node != 0 && o.node != o.parent {
				_, _ = m.admit(id, nodeID(o.parent), o.amt, false)
			}
		case opReserve:
			if o.node != 0 && o.node != o.parent {
				_ = m.reserve(id, nodeID(o.parent), o.amt)
			}
		case opCharge, opRetry:
			_ = m.charge(id, o.key, o.amt, false)
		case opReport:
			if e := m.e[id]; e != nil {
				_ = m.charge(id, "", e.own+e.overrun+o.amt/2, true)
			}
		case opRelease:
			if m.e[id] != nil {
				require.NoError(t, m.release(id, "completed"), "op %d release %s", i, id)
			}
		case opReopen:
			if e := m.e[id]; e != nil {
				_, _ = m.admit(id, e.parent, 0, true)
			}
		}
		require.NoError(t, m.check(), "after op %d %+v", i, o)
	}
	releaseAllModel(t, m)
}

func releaseAllModel(t testing.TB, m *model) {
	var ownSum int64
	for _, e := range m.e {
		ownSum += e.own
	}
	// Release in id order; order does not matter for the end state.
	for i := 15; i >= 0; i-- {
		id := nodeID(i)
		if _, ok := m.e[id]; ok {
			require.NoError(t, m.release(id, "completed"), "final release %s", id)
			require.NoError(t, m.check(), "after final release %s", id)
		}
	}
	root := m.e[nodeID(0)]
	require.Equal(t, ownSum, root.actual, "end: root actual %d reserved %d, want actual %d (sum of own) reserved 0", root.actual, root.reserved, ownSum)
	require.EqualValues(t, 0, root.reserved, "end: root actual %d reserved %d, want actual %d (sum of own) reserved 0", root.actual, root.reserved, ownSum)
}

// FuzzLedgerSequence fuzzes the ledger's rules (the Go model the Lua
// scripts are checked against): no op sequence breaks actual + reserved ≤
// max anywhere, every entry's actual is its own spend plus its children's
// at every step, its reserved is exactly its guaranteed descendants'
// holds, and releasing everything leaves every accepted charge in the root
// with nothing reserved.
func FuzzLedgerSequence(f *testing.F) {
	f.Add([]byte{20, 0, 1, 50, 0, 1, 1, 10, 1, 3, 1, 0, 0})
	f.Add([]byte{1, 0, 2, 255, 7, 1, 2, 9, 9, 3, 2, 0, 0, 1, 2, 200, 3})
	f.Add([]byte{5, 1, 1, 40, 0, 0, 2, 30, 1, 2, 2, 9, 3, 4, 1, 0, 0, 5, 1, 0, 0, 2, 2, 200, 7})
	f.Fuzz(func(t *testing.T, data []byte) {
		rootMax, ops := decodeOps(data)
		modelRun(t, rootMax, ops)
	})
}
