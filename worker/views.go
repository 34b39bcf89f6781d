package worker

import (
	"context"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/transcript"
)

// writeStartViews writes the views of a thread's start beside its turn
// loop, once its first checkpoint is durable: capabilities.md, and
// thread.json with status running, unless the thread already ended in that
// turn (Finalize writes the final thread.json right after, and a one-turn
// thread need not sign and write it twice).
func (s *session) writeStartViews(ctx context.Context) {
	s.startViews = false
	s.side.Go(ctx, s.log, "capabilities.md", s.writeCapabilities)
	if s.st.Final == nil {
		rec := *s.rec
		s.side.Go(ctx, s.log, "thread.json", func(ctx context.Context) error { return s.o.WriteThreadJSON(ctx, &rec) })
	}
}

func (s *session) writeCapabilities(ctx context.Context) error {
	body, err := transcript.RenderCapabilities(s.id(), s.toolDefs(), s.rec.Capabilities)
	if err != nil {
		return err
	}
	return blobstore.PutView(ctx, s.o.Store, transcript.CapabilitiesKey(s.id()), transcript.SignMarkdown(body, s.o.Signer, s.o.Now()))
}
