package worker

import (
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// droppedNote ends the denial of capability need for rec: a child runs
// without what its directive asks for and its parent does not hold
// (registry.Record.DroppedCapabilities), and its denials say so; "" for a
// capability the directive did not ask for.
func droppedNote(rec *registry.Record, need string) string {
	if thread.Match(rec.DroppedCapabilities, need) {
		return " because its parent does not hold it"
	}
	return ""
}
