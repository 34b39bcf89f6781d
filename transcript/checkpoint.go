package transcript

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/thread"
)

// Checkpoint reasons (spec/versioned-changesets.md); ReasonRetryWait is
// spool's: a thread handed back to wait out a provider's retry time.
const (
	ReasonUserMessage     = "user_message"
	ReasonAssistantTurn   = "assistant_turn_committed"
	ReasonToolResults     = "tool_results_committed"
	ReasonRunFinished     = "run_finished"
	ReasonWaitingChildren = "waiting_children"
	ReasonHandoff         = "handoff"
	ReasonRetryWait       = "retry_wait"
	// ReasonWaitingApproval: a tool call of the turn waits for a
	// person's decision (spool's own, as retry_wait).
	ReasonWaitingApproval = "waiting_approval"
	// ReasonWaitingMessage: a graph run waits for a message sent to it
	// (spool's own).
	ReasonWaitingMessage = "waiting_message"
)

// State is the operational state snapshot a checkpoint stores
// (spec/transcript-and-checkpoint-formats.md): what a new worker needs,
// besides the messages Reconstruct rebuilds, to continue the thread.
type State struct {
	Reason string `json:"reason,omitempty"` // one of the Reason constants
	Status string `json:"status,omitempty"` // thread status at the checkpoint
	// Iteration is the number of turns completed.
	Iteration int `json:"iteration"`
	// Version is the registry version this checkpoint committed
	// (optimistic concurrency), if the caller tracks one.
	Version                  int64          `json:"version,omitempty"`
	Cost                     thread.Cost    `json:"cost"`
	ToolCallsTotal           int            `json:"tool_calls_total"`
	ToolCallsIteration       int            `json:"tool_calls_iteration"`
	ToolCallsByTool          map[string]int `json:"tool_calls_by_tool,omitempty"`
	ToolCallsIterationByTool map[string]int `json:"tool_calls_iteration_by_tool,omitempty"`
	RunningSummary           string         `json:"running_summary,omitempty"`
	StopFlag                 bool           `json:"stop_flag,omitempty"`
	// Extra is opaque worker state; values must be valid JSON.
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
}

// Checkpoint is the payload of the checkpoint event that ends every segment.
// Field order is the wire order; Sig must stay last (see doc.go).
type Checkpoint struct {
	Segment int64 `json:"segment"` // this segment's number
	Events  int   `json:"events"`  // events in this segment before the checkpoint
	// DroppedDeltaBytes counts token_delta text dropped in this segment.
	DroppedDeltaBytes int64  `json:"dropped_delta_bytes,omitempty"`
	SHA256            string `json:"sha256"` // hex SHA-256 of every transcript byte before this line
	State             State  `json:"state"`
	// Artifacts are the hex SHA-256s of files written beside the
	// transcript with this turn, by name (ArtifactThreadJSON,
	// ArtifactCapabilities): the checkpoint's signature covers them, so
	// such a file needs no signature of its own (Writer.Attest,
	// Transcript.Attested). Checkpoints written before attestation have
	// none.
	Artifacts map[string]string `json:"artifacts,omitempty"`
	KeyID     string            `json:"key_id"`
	Algo      string            `json:"algo"` // "ed25519"
	Sig       string            `json:"sig"`  // base64url (no padding) Ed25519 signature
}

// Artifacts a checkpoint attests, by name: the file's name under
// blobkey.Thread.
const (
	ArtifactThreadJSON   = blobkey.ThreadJSONName
	ArtifactCapabilities = blobkey.CapabilitiesName
)

const (
	algoEd25519 = "ed25519"
	// checkpointDomain separates checkpoint signatures from every other use
	// of the same key.
	checkpointDomain = "spool-transcript-checkpoint-v1\n"
)

var (
	sigField = []byte(`"sig":"`)
	lineEnd  = []byte(`"}}`)
	b64      = base64.RawURLEncoding.Strict()
)

// validateThreadID rejects ids that would not make valid blob keys.
func validateThreadID(id string) error {
	if id == "" {
		return fmt.Errorf("thread id is empty")
	}
	if err := blobstore.ValidateKey(blobkey.ThreadJSON(id)); err != nil {
		return fmt.Errorf("thread id %q: %w", id, err)
	}
	return nil
}

// ErrTampered is matched (errors.Is) by every *VerifyError.
var ErrTampered = errors.New("transcript does not verify")

// VerifyError names where verification failed. Line is 1-based; 0 means the
// segment as a whole (missing, misnamed, no checkpoint).
type VerifyError struct {
	Key    string
	Line   int
	Reason string
	Err    error // underlying cause, e.g. ErrBadSignature, ErrUnknownKey
}

func (e *VerifyError) Error() string {
	loc := e.Key
	if e.Line > 0 {
		loc = fmt.Sprintf("%s line %d", e.Key, e.Line)
	}
	if e.Err != nil {
		return fmt.Sprintf("transcript %s: %s: %v", loc, e.Reason, e.Err)
	}
	return fmt.Sprintf("transcript %s: %s", loc, e.Reason)
}

// Is makes every verification failure match ErrTampered.
func (e *VerifyError) Is(target error) bool { return target == ErrTampered }

// Unwrap returns the underlying error, if any.
func (e *VerifyError) Unwrap() error { return e.Err }

// signCheckpoint returns the signed checkpoint line (without the newline).
func signCheckpoint(ts time.Time, threadID string, seq int64, cp Checkpoint, s *Signer) ([]byte, error) {
	cp.KeyID, cp.Algo, cp.Sig = s.KeyID(), algoEd25519, ""
	payload, err := marshal(cp)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	// One buffer: the signed message (the domain, then the line with an
	// empty sig), which then becomes the line, the signature in place.
	const sigLen = 86 // base64url of 64 bytes
	msg := make([]byte, 0, len(checkpointDomain)+len(payload)+len(threadID)+128+sigLen)
	msg = append(msg, checkpointDomain...)
	if msg, err = appendEvent(msg, ts, threadID, seq, TypeCheckpoint, payload); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if !bytes.HasSuffix(msg, []byte(`"sig":""}}`)) {
		return nil, fmt.Errorf("checkpoint: unexpected encoding %q", msg[max(0, len(msg)-20):])
	}
	sig := s.Sign(msg)
	line := b64.AppendEncode(msg[:len(msg)-len(lineEnd)], sig)
	line = append(line, lineEnd...)
	return line[len(checkpointDomain):], nil
}

// verifyCheckpoint checks a checkpoint line's signature and returns the
// parsed payload; the caller checks the hash, segment and counts.
func verifyCheckpoint(line []byte, ev *Event, keyring *Keyring) (*Checkpoint, string, error) {
	if !bytes.HasSuffix(line, lineEnd) {
		return nil, "checkpoint line does not end with its signature", nil
	}
	i := bytes.LastIndex(line, sigField)
	if i < 0 {
		return nil, "checkpoint line has no signature", nil
	}
	sigText := line[i+len(sigField) : len(line)-len(lineEnd)]
	var cp Checkpoint
	if err := json.Unmarshal(ev.Payload, &cp); err != nil {
		return nil, "checkpoint payload", err
	}
	if cp.Sig != string(sigText) {
		return nil, "checkpoint signature field is not the last field", nil
	}
	if cp.Algo != algoEd25519 {
		return nil, fmt.Sprintf("checkpoint algo %q", cp.Algo), nil
	}
	sig, err := b64.DecodeString(cp.Sig)
	if err != nil {
		return nil, "checkpoint signature encoding", err
	}
	msg := make([]byte, 0, len(checkpointDomain)+len(line)-len(sigText))
	msg = append(msg, checkpointDomain...)
	msg = append(msg, line[:i+len(sigField)]...) // the line with an empty sig
	msg = append(msg, lineEnd...)
	if err := keyring.Verify(cp.KeyID, msg, sig); err != nil {
		return nil, "checkpoint signature", err
	}
	return &cp, "", nil
}
