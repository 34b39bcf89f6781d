package worker

import (
	"github.com/spool-run/spool/thread"
)

// droppedNote ends the denial of capability need for a thread that
// dropped some: a child runs without what its directive asks for and its
// parent does not hold (registry.Record.DroppedCapabilities), and its
// denials say so; "" for a capability the directive did not ask for.
func droppedNote(dropped []string, need string) string {
	if thread.Match(dropped, need) {
		return " because its parent does not hold it"
	}
	return ""
}
