package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// stepItems are the settled items of a run's pending step, as this
// activation knows them: the results of those it settled or read back
// (as JSON values, by item index), the items settled since their last
// flush, and the stored objects of results it read. A child step's
// results do not ride in its checkpoint: flush writes those settled
// since the last flush as one content-addressed object and records a
// foreach_item_completed each, naming it, so a restore rebuilds the
// step's slots from the events and reads a result back (result) only
// when the step completes.
type stepItems struct {
	store blobstore.Store
	// run is the run's id, under which its objects are stored.
	run string
	// emit appends an event to the run's transcript.
	emit func(typ string, payload any)

	results   map[string]any
	unflushed []string
	chunks    map[string]map[string]any
}

// clear forgets the results of the step that was pending: a new step
// begins, or none is pending.
func (it *stepItems) clear() { it.results = nil }

// dirty reports whether items were settled since the last flush.
func (it *stepItems) dirty() bool { return len(it.unflushed) > 0 }

// settle records item i of p as ended with sl (and result, when it has
// one): its slot, and its result as the JSON value a restore reads back,
// so the step sees the same result whichever activation completes it. A
// failed item of a step that stops on a failure (a foreach's, unless
// on_item_error is continue) stops it.
func (it *stepItems) settle(s *stepRun, p *pendingStep, i string, sl slot, result any) error {
	if result != nil {
		v, b, err := plainJSON(result)
		if err != nil {
			return err
		}
		sl.SHA = sha256Hex(b)
		it.keepResult(i, v)
	}
	p.Slots[i] = sl
	if sl.Status == "error" && p.children().stopsOnFailure(s) {
		p.Stopping = true
	}
	it.unflushed = append(it.unflushed, i)
	return nil
}

// keepResult holds v as item i's result for the activation.
func (it *stepItems) keepResult(i string, v any) {
	if it.results == nil {
		it.results = map[string]any{}
	}
	it.results[i] = v
}

// flush records the items of p settled since the last flush: their
// results as one content-addressed object (one write per round, not per
// item), then a foreach_item_completed each, naming it. The events go
// into the segment of the checkpoint that follows.
func (it *stepItems) flush(ctx context.Context, p *pendingStep) error {
	if len(it.unflushed) == 0 {
		return nil
	}
	chunk := map[string]any{}
	for _, i := range it.unflushed {
		if v, ok := it.results[i]; ok && p.Slots[i].SHA != "" {
			chunk[i] = v
		}
	}
	addr := ""
	if len(chunk) > 0 {
		var err error
		if addr, err = putResult(ctx, it.store, it.run, chunk); err != nil {
			return err
		}
	}
	for _, i := range it.unflushed {
		sl := p.Slots[i]
		if sl.SHA != "" {
			sl.Chunk = addr
			p.Slots[i] = sl
		}
		idx, _ := strconv.Atoi(i)
		ev := transcript.ForeachItemCompleted{Step: p.Step, Node: p.Node, Index: idx, Status: sl.Status, ThreadID: sl.ThreadID,
			ResultSHA256: sl.SHA, Results: sl.Chunk}
		if sl.Status == "error" {
			ev.Error = &transcript.Error{Code: sl.Code, Message: sl.Message}
		}
		it.emit(transcript.TypeForeachItemCompleted, ev)
	}
	it.unflushed = nil
	return nil
}

// result is settled item i's result: this activation's, or read back
// from its stored object and checked against the digest its event names.
func (it *stepItems) result(ctx context.Context, i string, sl slot) (any, error) {
	if v, ok := it.results[i]; ok {
		return v, nil
	}
	if sl.SHA == "" {
		return nil, nil
	}
	chunk, err := it.chunk(ctx, it.run, sl.Chunk)
	if err != nil {
		return nil, err
	}
	v, ok := chunk[i]
	if !ok {
		return nil, fmt.Errorf("%w: item %s's result is not in %s", errStateInvalid, i, sl.Chunk)
	}
	if b, _ := json.Marshal(v); sha256Hex(b) != sl.SHA {
		return nil, fmt.Errorf("%w: item %s's result in %s is not the one its event names", errStateInvalid, i, sl.Chunk)
	}
	it.keepResult(i, v)
	return v, nil
}

// chunk reads a stored object of item results of run id (cached for the
// activation).
func (it *stepItems) chunk(ctx context.Context, id, addr string) (map[string]any, error) {
	key := id + "/" + addr
	if c, ok := it.chunks[key]; ok {
		return c, nil
	}
	v, err := getResult(ctx, it.store, id, addr)
	if err != nil {
		return nil, err
	}
	c, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s of %s is not an object of item results", errStateInvalid, addr, id)
	}
	if it.chunks == nil {
		it.chunks = map[string]map[string]any{}
	}
	it.chunks[key] = c
	return c, nil
}

// keep keeps in keep the items of p, a step of run from, that settled
// ok: their children were the old run's, their results are copied from
// its stored objects, and they are recorded in this run's transcript as
// its own (step_started naming them, then foreach_item_completed each),
// since a restore rebuilds the step from its events.
func (it *stepItems) keep(ctx context.Context, from string, p, keep *pendingStep) error {
	kept := map[string]string{}
	for k, sl := range p.Slots {
		if sl.Status != "ok" {
			continue
		}
		res := any(nil)
		if sl.SHA != "" {
			chunk, err := it.chunk(ctx, from, sl.Chunk)
			if err != nil {
				return err
			}
			res = chunk[k]
		}
		keep.Slots[k], keep.Children[k] = sl, sl.ThreadID
		if res != nil {
			it.keepResult(k, res)
		}
		kept[k] = sl.ThreadID
		it.unflushed = append(it.unflushed, k)
	}
	if len(kept) > 0 {
		it.emit(transcript.TypeStepStarted, transcript.StepStarted{Step: keep.Step, Node: keep.Node, Kind: keep.children().node(),
			Attempt: keep.Attempt, StartedAt: keep.StartedAt.Format(time.RFC3339Nano), Children: kept})
	}
	sort.Slice(it.unflushed, func(i, j int) bool { return atoiOr(it.unflushed[i]) < atoiOr(it.unflushed[j]) })
	return it.flush(ctx, keep)
}

// collect is the result of a foreach or a wait from the settled items of
// p (results in item order, errors), how many failed, and the first that
// did.
func (it *stepItems) collect(ctx context.Context, p *pendingStep) (map[string]any, int, *slot, error) {
	results := make([]any, p.Items)
	var errs []map[string]any
	failed, first := 0, (*slot)(nil)
	for i := 0; i < p.Items; i++ {
		sl, ok := p.Slots[strconv.Itoa(i)]
		if !ok {
			continue
		}
		if sl.Status == "ok" {
			res, err := it.result(ctx, strconv.Itoa(i), sl)
			if err != nil {
				return nil, 0, nil, err
			}
			results[i] = res
			continue
		}
		failed++
		if first == nil || first.Code == string(thread.StatusCancelled) && sl.Code != first.Code {
			first = &sl // the first failure, before items cancelled because of it
		}
		e := map[string]any{"index": i, "code": sl.Code, "message": sl.Message}
		if sl.ThreadID != "" {
			e["thread_id"] = sl.ThreadID
		}
		errs = append(errs, e)
	}
	res := foreachResult(results, errs, failed)
	res["succeeded"] = len(p.Slots) - failed
	return res, failed, first, nil
}

// plainJSON is v decoded from its JSON (maps, lists, float64s), and that
// value's JSON (sorted keys): the form a stored result is read back in.
func plainJSON(v any) (any, []byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, nil, err
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, nil, err
	}
	b, err = json.Marshal(out)
	return out, b, err
}

// sha256Hex is the hex SHA-256 of b.
func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
