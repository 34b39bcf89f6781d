package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
)

// Delta is a piece of the model's text as it is written
// (spooltype.Delta).
type Delta = spooltype.Delta

// FollowDeltas passes thread id's deltas to emit as its worker publishes
// them, until ctx ends: first the text of the model call in flight so
// far, then each piece as it comes, each byte once (a
// spooltype.DeltaCursor cuts overlaps). It subscribes before it asks for
// the text so far, so nothing between is lost; the worker publishes
// while the thread is followed, which this keeps asking for (every
// registry.FollowRefresh). Deltas are at most once
// and never stored: a piece the worker or Redis dropped leaves a gap its
// next Offset shows. An error from emit is returned as is.
func (o *Orchestrator) FollowDeltas(ctx context.Context, id string, emit func(Delta) error) error {
	ps, err := o.reg.Deltas(ctx, id)
	if err != nil {
		return err
	}
	defer func() { _ = ps.Close() }()
	if err := o.reg.RequestFollow(ctx, id); err != nil {
		return err
	}
	if err := o.reg.RequestDeltas(ctx, id); err != nil {
		return err
	}
	var cur spooltype.DeltaCursor
	ch := ps.Channel()
	refresh := time.NewTicker(registry.FollowRefresh)
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-refresh.C:
			if err := o.reg.RequestFollow(ctx, id); err != nil && ctx.Err() == nil {
				return err
			}
		case m, ok := <-ch:
			if !ok {
				return fmt.Errorf("deltas of %s: subscription closed", id)
			}
			var d Delta
			if json.Unmarshal([]byte(m.Payload), &d) != nil {
				continue
			}
			if d, ok := cur.Take(d); ok {
				if err := emit(d); err != nil {
					return err
				}
			}
		}
	}
}
