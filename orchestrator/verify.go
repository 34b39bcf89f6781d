package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// ErrArtifactsDeleted is returned by VerifyThread for a thread whose
// transcript and metadata retention deleted: there is nothing to verify.
var ErrArtifactsDeleted = errors.New("thread artifacts deleted by retention")

// IntegrityError is signed thread metadata (thread.json, capabilities.md)
// that does not verify or contradicts the registry. errors.Is(err,
// transcript.ErrTampered) is true, as for a transcript that does not verify.
type IntegrityError struct {
	Key    string // blob key of the file
	Reason string
	Err    error
}

func (e *IntegrityError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Key, e.Reason, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Key, e.Reason)
}

// Is matches transcript.ErrTampered.
func (e *IntegrityError) Is(target error) bool { return target == transcript.ErrTampered }
func (e *IntegrityError) Unwrap() error        { return e.Err }

// RegistryMark is the transcript mark rec holds, as transcript reads take
// it (ReadOptions.Marks, OpenWriter).
func RegistryMark(rec *queue.Record) transcript.Mark {
	return transcript.Mark{Segments: rec.Transcript.Segments, ChainHash: rec.Transcript.ChainHash, From: "registry"}
}

// RecordMark is m as the registry records it (queue.Changes.Transcript).
func RecordMark(m transcript.Mark) *queue.TranscriptMark {
	return &queue.TranscriptMark{Segments: m.Segments, ChainHash: m.ChainHash}
}

// Metadata is a thread's verified signed metadata.
type Metadata struct {
	// Record is the registry record the files were checked against, read
	// after them.
	Record *queue.Record
	// ThreadJSON is thread.json, verified and consistent with the
	// registry; nil when there is none (or lenient mode let a bad one
	// pass with a warning).
	ThreadJSON *queue.Record
	// Capabilities is capabilities.md, likewise.
	Capabilities *transcript.CapabilitiesFile
	// Warnings lists what lenient mode let pass.
	Warnings []string
}

// Marks are the transcript marks the registry record and thread.json
// hold: the transcript must reach the higher one, and match both.
func (m *Metadata) Marks() []transcript.Mark {
	marks := []transcript.Mark{RegistryMark(m.Record)}
	if m.ThreadJSON != nil && m.ThreadJSON.Transcript.Segments > 0 {
		tj := m.ThreadJSON.Transcript
		marks = append(marks, transcript.Mark{Segments: tj.Segments, ChainHash: tj.ChainHash, From: "thread.json"})
	}
	return marks
}

// finalizeGrace is how long after its record last changed a finished
// thread may still lack thread.json: Finalize writes it just after its
// commit.
const finalizeGrace = 30 * time.Second

// VerifyMetadata loads thread id's thread.json and capabilities.md,
// verifies their signatures with the keyring, then reads the registry
// record and checks the files against it:
//
//   - thread.json must name the thread, its directive and parent, hold the
//     registry's limits and capabilities, and be a state the registry's
//     could have come from: not a later version, at the same version the
//     same status, at an earlier one a status that can become the
//     registry's; its transcript mark may not be ahead of the registry's;
//   - capabilities.md must be drawn for the thread and its capabilities.
//
// The record is read after the files because a view is written after the
// commit it shows: so read, the registry is never behind a genuine view.
// Both files are views written beside the turn loop, not records: a
// missing capabilities.md is never an error (a thread that failed before
// its first turn has none), nor is a missing thread.json on a thread that
// has not finished. A finished thread has one (Finalize writes it), so its
// absence is, once finalizeGrace has passed. In strict mode the first
// problem is returned as an *IntegrityError; in lenient mode problems are
// listed in Warnings.
func (o *Orchestrator) VerifyMetadata(ctx context.Context, id string, mode transcript.Mode) (*Metadata, error) {
	tjKey, capKey := transcript.ThreadJSONKey(id), transcript.CapabilitiesKey(id)
	tjData, err := o.Store.Get(ctx, tjKey)
	if err != nil && !errors.Is(err, blobstore.ErrNotFound) {
		return nil, fmt.Errorf("verify %s: %w", tjKey, err)
	}
	capData, err := o.Store.Get(ctx, capKey)
	if err != nil && !errors.Is(err, blobstore.ErrNotFound) {
		return nil, fmt.Errorf("verify %s: %w", capKey, err)
	}
	rec, err := o.Registry.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	md := &Metadata{Record: rec}
	var problems []error
	switch {
	case tjData == nil:
		if rec.Status.Terminal() && o.Now().Sub(rec.UpdatedAt) > finalizeGrace {
			problems = append(problems, &IntegrityError{Key: tjKey, Reason: fmt.Sprintf("missing, and the thread is %s", rec.Status)})
		}
	default:
		var tj queue.Record
		if _, err := transcript.VerifyJSON(tjData, o.Keyring, &tj); err != nil {
			problems = append(problems, &IntegrityError{Key: tjKey, Reason: "signature", Err: err})
		} else if reason := contradiction(&tj, rec); reason != "" {
			problems = append(problems, &IntegrityError{Key: tjKey, Reason: reason})
		} else {
			md.ThreadJSON = &tj
		}
	}
	if capData != nil {
		cf, err := transcript.ReadCapabilities(capData, o.Keyring)
		switch {
		case err != nil:
			problems = append(problems, &IntegrityError{Key: capKey, Reason: "signature", Err: err})
		case !cf.For(id):
			problems = append(problems, &IntegrityError{Key: capKey, Reason: "drawn for another thread"})
		case !cf.Lists(rec.Capabilities):
			problems = append(problems, &IntegrityError{Key: capKey, Reason: fmt.Sprintf("capabilities differ from the registry's %q", rec.Capabilities)})
		default:
			md.Capabilities = cf
		}
	}
	for _, p := range problems {
		if mode == transcript.Strict {
			return nil, p
		}
		md.Warnings = append(md.Warnings, p.Error())
	}
	return md, nil
}

// contradiction says how thread.json (tj) contradicts the registry record
// (rec), or "".
func contradiction(tj, rec *queue.Record) string {
	switch {
	case tj.ThreadID != rec.ThreadID:
		return fmt.Sprintf("names thread %q", tj.ThreadID)
	case tj.Directive != rec.Directive:
		return fmt.Sprintf("directive %q, the registry has %q", tj.Directive, rec.Directive)
	case tj.ParentID != rec.ParentID:
		return fmt.Sprintf("parent %q, the registry has %q", tj.ParentID, rec.ParentID)
	case tj.Limits != rec.Limits:
		return fmt.Sprintf("limits %+v, the registry has %+v", tj.Limits, rec.Limits)
	case !sameSet(tj.Capabilities, rec.Capabilities):
		return fmt.Sprintf("capabilities %q, the registry has %q", tj.Capabilities, rec.Capabilities)
	case tj.Version > rec.Version:
		return fmt.Sprintf("version %d is ahead of the registry's %d", tj.Version, rec.Version)
	case tj.Version == rec.Version && tj.Status != rec.Status:
		return fmt.Sprintf("status %s at version %d, the registry has %s", tj.Status, tj.Version, rec.Status)
	case !canBecome(tj.Status, rec.Status):
		return fmt.Sprintf("status %s cannot have become the registry's %s", tj.Status, rec.Status)
	case tj.Transcript.Segments > rec.Transcript.Segments:
		return fmt.Sprintf("transcript mark %d segments is ahead of the registry's %d", tj.Transcript.Segments, rec.Transcript.Segments)
	}
	return ""
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// canBecome reports whether a thread in status from can later be in status
// to: the same status, a path through the transition table, or a finished
// thread resumed (linked as continued).
func canBecome(from, to thread.Status) bool {
	seen := map[thread.Status]bool{from: true}
	todo := []thread.Status{from}
	for len(todo) > 0 {
		s := todo[0]
		todo = todo[1:]
		if s == to {
			return true
		}
		for _, next := range thread.Statuses {
			if !seen[next] && (thread.CanTransition(s, next) || s.Resumable() && next == thread.StatusContinued) {
				seen[next] = true
				todo = append(todo, next)
			}
		}
	}
	return false
}

// Verified is a thread whose signed state verified.
type Verified struct {
	Metadata   *Metadata
	Transcript *transcript.Transcript
	// Warnings lists what lenient mode let pass, metadata first.
	Warnings []string
}

// Record is the registry record the thread was verified against.
func (v *Verified) Record() *queue.Record { return v.Metadata.Record }

// VerifyThread verifies everything signed about thread id before its state
// is used (resume, a handoff's continuation, `spool thread verify`): its
// metadata (VerifyMetadata), then its transcript, held to the transcript
// marks of the registry and thread.json, so that deleting the last
// segments of a finished thread, or any segment the registry knows
// durable, fails strict verification naming the missing segment. A thread
// whose artifacts retention deleted is ErrArtifactsDeleted.
func (o *Orchestrator) VerifyThread(ctx context.Context, id string, mode transcript.Mode) (*Verified, error) {
	md, err := o.VerifyMetadata(ctx, id, mode)
	if err != nil {
		return nil, fmt.Errorf("verify thread %s: %w", id, err)
	}
	if at := md.Record.Extra[queue.ArtifactsDeletedField]; at != "" {
		return nil, fmt.Errorf("thread %s: %w at %s", id, ErrArtifactsDeleted, at)
	}
	tr, err := transcript.ReadWith(ctx, o.Store, id, o.Keyring, transcript.ReadOptions{Mode: mode, Marks: md.Marks()})
	if err != nil {
		return nil, fmt.Errorf("verify thread %s: %w", id, err)
	}
	v := &Verified{Metadata: md, Transcript: tr}
	v.Warnings = append(append(v.Warnings, md.Warnings...), tr.Warnings...)
	return v, nil
}

// VerifiedTranscript is the transcript of thread id after VerifyThread,
// for a continuation that is about to build on it; what lenient mode let
// pass is logged.
func (o *Orchestrator) VerifiedTranscript(ctx context.Context, id string, mode transcript.Mode) (*transcript.Transcript, error) {
	v, err := o.VerifyThread(ctx, id, mode)
	if err != nil {
		return nil, err
	}
	for _, w := range v.Warnings {
		o.threadLog(id).Warn("continuing despite an integrity problem (transcript_integrity: lenient)", "warning", w)
	}
	return v.Transcript, nil
}
