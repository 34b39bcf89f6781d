package worker

import (
	"context"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/transcript"
)

// views are the start's files a checkpoint attests, written once it is
// durable (nil: not this one).
type views struct {
	capabilities []byte // capabilities.md
	threadJSON   []byte // thread.json, status running
}

// attestViews has the checkpoint about to be written attest the files
// written with it, so that its signature is the only one they need: at
// the thread's start (startViews) capabilities.md, fixed for the thread's
// life, and thread.json with status running unless the thread ends in
// this checkpoint; at its end (final not nil) the final thread.json,
// which Finalize writes (orchestrator.AttestFinal). It returns the
// start's views, for writeStartViews. A view that does not render is
// logged and left out, as a failed write of it would be.
func (s *session) attestViews(ctx context.Context, final *orchestrator.Outcome) (*views, error) {
	var v *views
	if s.startViews {
		v = &views{}
		body, err := transcript.RenderCapabilities(s.id(), s.tools.toolDefs(), s.rec.Capabilities)
		if err != nil {
			s.log.Warn("capabilities.md not rendered", "error", err)
		} else {
			v.capabilities = body
			s.tw.Attest(transcript.ArtifactCapabilities, body)
		}
		if s.st.Final == nil {
			rec := *s.rec
			if data, err := orchestrator.ThreadJSON(&rec); err != nil {
				s.log.Warn("thread.json not rendered", "error", err)
			} else {
				v.threadJSON = data
				s.tw.Attest(transcript.ArtifactThreadJSON, data)
			}
		}
	}
	if final != nil {
		if err := s.o.AttestFinal(ctx, s.rec, s.version, final, s.tw.NextSegment()); err != nil {
			return nil, err
		}
		s.tw.Attest(transcript.ArtifactThreadJSON, final.ThreadJSON.Data)
	}
	return v, nil
}

// writeStartViews writes the views of a thread's start beside its turn
// loop, once the first checkpoint, which attests them, is durable:
// capabilities.md, and thread.json with status running unless the thread
// already ended in that turn (Finalize writes the final thread.json right
// after, and a one-turn thread need not write it twice).
func (s *session) writeStartViews(ctx context.Context, v *views) {
	s.startViews = false
	for _, f := range []struct {
		key  string
		data []byte
	}{{blobkey.Capabilities(s.id()), v.capabilities}, {blobkey.ThreadJSON(s.id()), v.threadJSON}} {
		if f.data == nil {
			continue
		}
		s.side.Go(ctx, s.log, f.key, func(ctx context.Context) error { return blobstore.PutView(ctx, s.store, f.key, f.data) })
	}
}
