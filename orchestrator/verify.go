package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// ErrArtifactsDeleted is returned by VerifyThread for a thread whose
// transcript and metadata retention deleted: there is nothing to verify.
var ErrArtifactsDeleted = errors.New("thread artifacts deleted by retention")

// IntegrityError is thread metadata (thread.json, capabilities.md), signed
// or attested, that does not verify or contradicts the registry. errors.Is(err,
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
func RegistryMark(rec *registry.Record) transcript.Mark {
	return transcript.Mark{Segments: rec.Transcript.Segments, ChainHash: rec.Transcript.ChainHash, From: "registry"}
}

// RecordMark is m as the registry records it (registry.Changes.Transcript).
func RecordMark(m transcript.Mark) *registry.TranscriptMark {
	return &registry.TranscriptMark{Segments: m.Segments, ChainHash: m.ChainHash}
}

// Metadata is a thread's verified metadata, signed or attested.
type Metadata struct {
	// Record is the registry record the files were checked against, read
	// after them.
	Record *registry.Record
	// ThreadJSON is thread.json, verified and consistent with the
	// registry; nil when there is none (or lenient mode let a bad one
	// pass with a warning).
	ThreadJSON *registry.Record
	// Capabilities is capabilities.md, likewise.
	Capabilities *transcript.CapabilitiesFile
	// ThreadJSONAttested and CapabilitiesAttested are the segments whose
	// checkpoints attest the files; 0: signed (or absent).
	ThreadJSONAttested, CapabilitiesAttested int64
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

// metadataFiles are a thread's thread.json and capabilities.md as read
// (nil: absent).
type metadataFiles struct {
	threadJSON, capabilities []byte
}

func (o *Orchestrator) readMetadata(ctx context.Context, id string) (metadataFiles, error) {
	var f metadataFiles
	for _, file := range []struct {
		key  string
		data *[]byte
	}{{blobkey.ThreadJSON(id), &f.threadJSON}, {blobkey.Capabilities(id), &f.capabilities}} {
		data, err := o.store.Get(ctx, file.key)
		if err != nil && !errors.Is(err, blobstore.ErrNotFound) {
			return f, fmt.Errorf("verify %s: %w", file.key, err)
		}
		*file.data = data
	}
	return f, nil
}

// signedJSON reports whether data, a thread.json, has a _signature member
// (SignJSON's); one without is attested.
func signedJSON(data []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return true // not JSON: VerifyJSON says why
	}
	_, ok := top[transcript.SignatureField]
	return ok
}

// signedMarkdown reports whether data, a capabilities.md, opens with a
// signature line (SignMarkdown's); one without is attested.
func signedMarkdown(data []byte) bool { return bytes.HasPrefix(data, []byte("<!-- rye:signed:")) }

// errNotAttested is the cause of an attested file that no verified
// checkpoint attests: a file edited since, or whose checkpoint is gone.
var errNotAttested = fmt.Errorf("no verified checkpoint attests its SHA-256: %w", transcript.ErrBadSignature)

// verifySigned checks the signed files of f (the attested ones wait for
// the transcript: verifyAttested) against rec into md, and returns the
// problems found.
func verifySigned(f metadataFiles, keyring *transcript.Keyring, rec *registry.Record, md *Metadata) []error {
	id := rec.ThreadID
	var problems []error
	if f.threadJSON != nil && signedJSON(f.threadJSON) {
		var tj registry.Record
		if _, err := transcript.VerifyJSON(f.threadJSON, keyring, &tj); err != nil {
			problems = append(problems, &IntegrityError{Key: blobkey.ThreadJSON(id), Reason: "signature", Err: err})
		} else if p := checkThreadJSON(&tj, rec); p != nil {
			problems = append(problems, p)
		} else {
			md.ThreadJSON = &tj
		}
	}
	if f.capabilities != nil && signedMarkdown(f.capabilities) {
		cf, err := transcript.ReadCapabilities(f.capabilities, keyring)
		if err != nil {
			problems = append(problems, &IntegrityError{Key: blobkey.Capabilities(id), Reason: "signature", Err: err})
		} else if p := checkCapabilities(cf, rec); p != nil {
			problems = append(problems, p)
		} else {
			md.Capabilities = cf
		}
	}
	return problems
}

// verifyAttested checks the attested files of f against the verified
// transcript tr and against rec into md, and returns the problems found.
func verifyAttested(f metadataFiles, tr *transcript.Transcript, rec *registry.Record, md *Metadata) []error {
	id := rec.ThreadID
	var problems []error
	if f.threadJSON != nil && !signedJSON(f.threadJSON) {
		key := blobkey.ThreadJSON(id)
		var tj registry.Record
		if md.ThreadJSONAttested = tr.Attested(transcript.ArtifactThreadJSON, f.threadJSON); md.ThreadJSONAttested == 0 {
			problems = append(problems, &IntegrityError{Key: key, Reason: "attestation", Err: errNotAttested})
		} else if err := json.Unmarshal(f.threadJSON, &tj); err != nil {
			problems = append(problems, &IntegrityError{Key: key, Reason: "attested, but not a record", Err: err})
		} else if p := checkThreadJSON(&tj, rec); p != nil {
			problems = append(problems, p)
		} else {
			md.ThreadJSON = &tj
		}
	}
	if f.capabilities != nil && !signedMarkdown(f.capabilities) {
		key := blobkey.Capabilities(id)
		if md.CapabilitiesAttested = tr.Attested(transcript.ArtifactCapabilities, f.capabilities); md.CapabilitiesAttested == 0 {
			problems = append(problems, &IntegrityError{Key: key, Reason: "attestation", Err: errNotAttested})
		} else if cf, err := transcript.ParseCapabilities(f.capabilities); err != nil {
			problems = append(problems, &IntegrityError{Key: key, Reason: "attested, but not capabilities", Err: err})
		} else if p := checkCapabilities(cf, rec); p != nil {
			problems = append(problems, p)
		} else {
			md.Capabilities = cf
		}
	}
	return problems
}

// checkThreadJSON is a verified thread.json that contradicts the
// registry record rec, as an *IntegrityError, or nil.
func checkThreadJSON(tj, rec *registry.Record) error {
	if reason := contradiction(tj, rec); reason != "" {
		return &IntegrityError{Key: blobkey.ThreadJSON(rec.ThreadID), Reason: reason}
	}
	return nil
}

// checkCapabilities is a verified capabilities.md that was not drawn for
// rec's thread and capabilities, as an *IntegrityError, or nil.
func checkCapabilities(cf *transcript.CapabilitiesFile, rec *registry.Record) error {
	key := blobkey.Capabilities(rec.ThreadID)
	switch {
	case !cf.For(rec.ThreadID):
		return &IntegrityError{Key: key, Reason: "drawn for another thread"}
	case !cf.Lists(rec.Capabilities):
		return &IntegrityError{Key: key, Reason: fmt.Sprintf("capabilities differ from the registry's %q", rec.Capabilities)}
	}
	return nil
}

// contradiction says how thread.json (tj) contradicts the registry record
// (rec), or "".
func contradiction(tj, rec *registry.Record) string {
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
func (v *Verified) Record() *registry.Record { return v.Metadata.Record }

// VerifyThread verifies everything signed about thread id before its state
// is used (resume, a handoff's continuation, a fork, `spool thread
// verify`): its transcript and its metadata, against the registry record
// (read after the files, because a view is written after the commit it
// shows: so read, the registry is never behind a genuine view).
//
// The metadata are thread.json and capabilities.md, each either signed
// (SignJSON, SignMarkdown) or attested by a checkpoint (attest.go):
//
//   - thread.json must name the thread, its directive and parent, hold the
//     registry's limits and capabilities, and be a state the registry's
//     could have come from: not a later version, at the same version the
//     same status, at an earlier one a status that can become the
//     registry's; its transcript mark may not be ahead of the registry's;
//   - capabilities.md must be drawn for the thread and its capabilities.
//
// Signed files are checked first; the transcript is then read held to the
// transcript marks of the registry and of a signed thread.json, so that
// deleting the last segments of a finished thread, or any segment the
// registry knows durable, fails strict verification naming the missing
// segment; attested files are then looked for in the checkpoints that
// verified (so deleting the segment that attests one fails it too).
//
// Both files are views written beside the turn loop, not records: a
// missing capabilities.md is never an error (a thread that failed before
// its first turn has none), nor is a missing thread.json on a thread that
// has not finished. A finished thread has one (Finalize writes it), so its
// absence is, once finalizeGrace has passed. In strict mode the first
// problem is returned (an *IntegrityError, or the transcript's
// *transcript.VerifyError); in lenient mode problems are listed in
// Warnings. A thread whose artifacts retention deleted is
// ErrArtifactsDeleted.
func (o *Orchestrator) VerifyThread(ctx context.Context, id string, mode transcript.Mode) (*Verified, error) {
	files, err := o.readMetadata(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("verify thread %s: %w", id, err)
	}
	rec, err := o.reg.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("verify thread %s: %w", id, err)
	}
	if at := rec.Extra[registry.ArtifactsDeletedField]; at != "" {
		return nil, fmt.Errorf("thread %s: %w at %s", id, ErrArtifactsDeleted, at)
	}
	md := &Metadata{Record: rec}
	// keep returns the first problem in strict mode, and lists them all
	// in lenient mode.
	keep := func(problems []error) error {
		for _, p := range problems {
			if mode == transcript.Strict {
				return fmt.Errorf("verify thread %s: %w", id, p)
			}
			md.Warnings = append(md.Warnings, p.Error())
		}
		return nil
	}
	var missing []error
	if files.threadJSON == nil && rec.Status.Terminal() && o.Now().Sub(rec.UpdatedAt) > finalizeGrace {
		missing = append(missing, &IntegrityError{Key: blobkey.ThreadJSON(id), Reason: fmt.Sprintf("missing, and the thread is %s", rec.Status)})
	}
	if err := keep(append(missing, verifySigned(files, o.keyring, rec, md)...)); err != nil {
		return nil, err
	}
	tr, err := transcript.ReadWith(ctx, o.store, id, o.keyring, transcript.ReadOptions{Mode: mode, Marks: md.Marks()})
	if err != nil {
		return nil, fmt.Errorf("verify thread %s: %w", id, err)
	}
	if err := keep(verifyAttested(files, tr, rec, md)); err != nil {
		return nil, err
	}
	v := &Verified{Metadata: md, Transcript: tr}
	v.Warnings = append(append(v.Warnings, md.Warnings...), tr.Warnings...)
	return v, nil
}

// VerifiedTranscript is the transcript of thread id after VerifyThread,
// for a continuation that is about to build on it; what lenient mode let
// pass is logged.
func (rt *Runtime) VerifiedTranscript(ctx context.Context, id string, mode transcript.Mode) (*transcript.Transcript, error) {
	v, err := rt.VerifyThread(ctx, id, mode)
	if err != nil {
		return nil, err
	}
	for _, w := range v.Warnings {
		rt.threadLog(id).Warn("continuing despite an integrity problem (transcript_integrity: lenient)", "warning", w)
	}
	return v.Transcript, nil
}
