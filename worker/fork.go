package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// forkSeed builds a fork's first messages (orchestrator.Fork) and records
// its thread_forked event, the first of its transcript: the source's
// verified transcript up to the end of the fork's turn, its tool calls and
// results as they were recorded (nothing runs again), calls left without
// a result answered as not run (closeToolCalls), then the fork's message.
// A fork without a message whose prefix ends with the model's answer
// gets the spec's continuation instruction, so that the conversation
// ends with a user's turn. The source is verified strictly, and the
// segment that ends the turn must still have the chain hash the fork was
// made with: a source tampered with since is a transcript_integrity
// failure, and the fork never runs on it.
func (s *session) forkSeed(ctx context.Context) ([]thread.Message, error) {
	src := s.rec.ForkedFrom
	v, err := s.o.VerifyThread(ctx, src, transcript.Strict)
	if err != nil {
		if errors.Is(err, transcript.ErrTampered) {
			return nil, &permanentError{code: "transcript_integrity", msg: err.Error()}
		}
		return nil, err
	}
	pt, err := v.Transcript.ForkAt(s.rec.ForkTurn)
	if err != nil {
		return nil, &permanentError{code: "transcript_integrity", msg: err.Error()}
	}
	if pt.Segment != s.rec.ForkSegment || pt.ChainHash != s.rec.ForkChainHash {
		return nil, &permanentError{code: "transcript_integrity", msg: fmt.Sprintf(
			"the transcript of %s no longer ends turn %d in segment %d with chain hash %s (now segment %d, %s): it is not the prefix the fork was made from",
			src, s.rec.ForkTurn, s.rec.ForkSegment, s.rec.ForkChainHash, pt.Segment, pt.ChainHash)}
	}
	rebuilt, err := transcript.Reconstruct(v.Transcript.Prefix(pt.Seq))
	if err != nil {
		return nil, &permanentError{code: "transcript_integrity", msg: err.Error()}
	}
	msgs := closeToolCalls(rebuilt)
	switch {
	case s.rec.ForkMessage != "":
		msgs = append(msgs, thread.Message{Role: thread.RoleUser, Content: s.rec.ForkMessage})
	case len(msgs) > 0 && msgs[len(msgs)-1].Role == thread.RoleAssistant:
		msgs = append(msgs, thread.Message{Role: thread.RoleUser, Content: continueMessage})
	}
	s.emit(transcript.TypeThreadForked, transcript.ThreadForked{ForkedFrom: src, ForkTurn: s.rec.ForkTurn, SourceSegment: pt.Segment,
		SourceChainHash: pt.ChainHash, ReconstructedTurns: carriedTurns(msgs), Message: s.rec.ForkMessage})
	return msgs, nil
}
