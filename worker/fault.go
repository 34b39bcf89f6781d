package worker

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/spool-run/spool/tools"
)

// Fault points for crash-exactness tests: SPOOL_FAULT_KILL_AT=POINT[#N]
// in a worker's environment makes the worker SIGKILL itself the Nth time
// (default the first) it reaches POINT, exactly where a crash is hardest
// to survive (a segment planned but its children not started, children
// started but not recorded, ...). Unset, a point costs an atomic load. The
// points:
//
//	graph:after_plan       a child step's planned ids are durable, no child started
//	graph:after_start      its children are started, the run not yet suspended
//	graph:after_item       a settled item is durable, the next not yet planned
//	graph:before_complete  a step's result is assigned, its segment not written
//	graph:before_stop      an item failed and its foreach stops, the running items not yet cancelled
//	graph:sleep_checkpointed  a sleep's wake time is durable, the run not suspended
//	graph:sleep_suspended  a sleeping run is suspended, its wake not yet enqueued
//	thread:before_spawn    a turn is about to start its child, nothing registered
//	thread:after_spawn     a turn's child is started, the turn not checkpointed
//	workspace:journaled    a command's write-back journal is durable, no file stored
//	workspace:after_file   the write-back's first file is stored, the others not
var faultAt = func() (point string, nth int64) {
	v := os.Getenv("SPOOL_FAULT_KILL_AT")
	if v == "" {
		return "", 0
	}
	p, n, ok := strings.Cut(v, "#")
	nth = 1
	if ok {
		if x, err := strconv.ParseInt(n, 10, 64); err == nil && x > 0 {
			nth = x
		}
	}
	return p, nth
}

var (
	faultPoint, faultNth = faultAt()
	faultSeen            atomic.Int64
)

// The write-back's points are in package tools, which calls its Fault.
func init() {
	if faultPoint != "" {
		tools.Fault = fault
	}
}

// fault kills the process at point when SPOOL_FAULT_KILL_AT names it.
func fault(point string) {
	if faultPoint == "" || point != faultPoint {
		return
	}
	if faultSeen.Add(1) == faultNth {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
