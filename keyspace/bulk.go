package keyspace

// Bulk operations (`spool thread bulk`, POST /v1/bulk) live on the
// namespace's own tag, as locks do: an operation is rare next to the
// runs it acts on, and its scripts touch its record, its run list and
// the running index together, which one slot keeps single-slot on a
// Cluster.

// Bulk is the record of bulk operation id (a hash: action, filter,
// status, matched, next, done, failed, owner and lease, ...).
func (s Space) Bulk(id string) string { return s.prefix + "bulk:" + id }

// BulkRuns is the list of the runs operation id matched when it was
// made, in the order it acts on them.
func (s Space) BulkRuns(id string) string { return s.prefix + "bulk:" + id + ":runs" }

// BulkFailures is the hash of the runs operation id failed to act on:
// run id → the error.
func (s Space) BulkFailures(id string) string { return s.prefix + "bulk:" + id + ":failures" }

// BulkRunning is the sorted set of the operations not finished yet
// (score: when each was made, unix ms), where a process looks for an
// operation whose runner died.
func (s Space) BulkRunning() string { return s.prefix + "bulk:running" }

// BulkAll is the sorted set of every operation (score: when it was made,
// unix ms), for listing them newest first.
func (s Space) BulkAll() string { return s.prefix + "bulk:all" }
