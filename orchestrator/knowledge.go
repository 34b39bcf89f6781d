package orchestrator

import (
	"context"
	"fmt"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/transcript"
)

// Knowledge returns the knowledge render of thread rec (the markdown a
// hook's load action puts in a model's context), made from its transcript
// read strictly, held to the registry's mark: a render of a verified
// transcript, verified itself.
//
// Renders are made when they are read, not at a running thread's
// checkpoints: they are for people and hooks, and signing and writing one
// per checkpoint was a third of a turn's work. The one made here is also
// written, signed, at blobkey.Knowledge (best effort; when this
// process holds the signing key), for whoever reads the store.
func (rt *Runtime) Knowledge(ctx context.Context, rec *registry.Record) ([]byte, error) {
	tr, err := rt.readHeld(ctx, rec, transcript.Strict)
	if err != nil {
		return nil, fmt.Errorf("knowledge of thread %s: %w", rec.ThreadID, err)
	}
	meta := transcript.KnowledgeMeta{ThreadID: rec.ThreadID, Directive: rec.Directive, Status: string(rec.Status),
		Model: rec.Model, Turns: rec.Cost.Turns, Spend: rec.Cost.Spend, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt}
	body := transcript.RenderKnowledge(meta, tr.Events)
	if rt.signer != nil {
		signed := transcript.SignedKnowledge(meta, tr.Events, rt.signer, rt.Now())
		if err := blobstore.PutView(ctx, rt.store, blobkey.Knowledge(rec.Directive, rec.ThreadID), signed); err != nil {
			rt.threadLog(rec.ThreadID).Warn("knowledge render not stored", "error", err)
		}
	}
	return body, nil
}
