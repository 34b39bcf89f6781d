package registry

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/thread"
)

// regForgetScript deletes what Redis holds of one finished thread.
//
// KEYS[1] thread hash, KEYS[2] its shard's threads index, KEYS[3] active
// set, KEYS[4] awaiting-approval set, KEYS[5..] the thread's own keys
// (ledger entry, children, forks, spawns, cancel flag, waits, decisions,
// inbox, lease, chain waiters)
// ARGV[1] thread id, ARGV[2] the version the caller read
// Returns 1; refuses NOTFOUND, CONFLICT <version> (the record changed
// since it was read: a resume linked it, say), TRANSITION <status>
// forgotten (it is not finished).
var regForgetScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'status', 'version')
if not cur[1] then return redis.error_reply('NOTFOUND ' .. ARGV[1]) end
if cur[2] ~= ARGV[2] then return redis.error_reply('CONFLICT ' .. cur[2]) end
local final = {completed = true, error = true, cancelled = true, continued = true}
if not final[cur[1]] then return redis.error_reply('TRANSITION ' .. cur[1] .. ' forgotten') end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
redis.call('SREM', KEYS[4], ARGV[1])
local own = {KEYS[1]}
for i = 5, #KEYS do own[#own + 1] = KEYS[i] end
redis.call('DEL', unpack(own))
return 1
`)

// Forget deletes what Redis holds of finished thread rec, as read at
// rec.Version: its record, ledger entry, children and forks sets, spawn
// counter, cancel flag, waits, decisions, inbox, lease and chain waiters,
// and its entries in its shard's threads index and active and
// awaiting-approval sets. Its parent's children set and its source's
// forks set still name it until they go with their own thread (List and
// ListChildren leave out an id without a record). It refuses a thread
// that is not finished (*thread.TransitionError) or whose record changed
// since it was read (*ConflictError), and one already forgotten
// (ErrNotFound). Housekeeping forgets whole trees, long after their
// artifacts went (scheduler's RecordRetention).
func (r *Registry) Forget(ctx context.Context, rec *Record) error {
	id := rec.ThreadID
	if !rec.Status.Terminal() {
		return fmt.Errorf("forget thread %q: %w", id, &thread.TransitionError{From: rec.Status, To: "forgotten"})
	}
	keys := []string{r.ks.Thread(id), r.ks.Threads(id), r.ks.Active(id), r.ks.AwaitingApproval(id),
		r.ks.Ledger(id), r.ks.Children(id), r.ks.Forks(id), r.ks.Spawns(id), r.ks.Cancel(id), r.ks.Waits(id),
		r.ks.Decisions(id), r.ks.Inbox(id), r.ks.Lease(id), r.ks.Waiters(id)}
	err := regForgetScript.Run(ctx, r.rdb, keys, id, strconv.FormatInt(rec.Version, 10)).Err()
	if rerr := RefusalError(id, rec.Version, err); rerr != nil {
		return rerr
	}
	if err != nil {
		return fmt.Errorf("forget thread %q: %w", id, err)
	}
	return nil
}
