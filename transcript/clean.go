package transcript

import (
	"context"
	"errors"
	"fmt"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
)

// CleanOptions choose what Clean removes (the spec's
// clean(delete_transcript, delete_checkpoint)).
type CleanOptions struct {
	// Transcript removes the transcript segments (and with them the
	// checkpoints inside them) and the knowledge render.
	Transcript bool
	// Checkpoints removes the checkpoints. They live inside the segments
	// (one create-only write commits a turn and its state), so they cannot
	// be removed alone: Checkpoints without Transcript is an error.
	Checkpoints bool
	// Metadata removes thread.json and capabilities.md.
	Metadata bool
	// Directive locates the knowledge render (blobkey.Knowledge); empty skips it.
	Directive string
}

// Clean deletes a thread's persisted artifacts and returns the deleted keys.
// Deleting what is already gone is not an error.
func Clean(ctx context.Context, store blobstore.Store, threadID string, opts CleanOptions) ([]string, error) {
	if err := validateThreadID(threadID); err != nil {
		return nil, err
	}
	if opts.Checkpoints && !opts.Transcript {
		return nil, fmt.Errorf("clean %s: checkpoints live inside transcript segments; clean them with the transcript", threadID)
	}
	var keys []string
	if opts.Transcript {
		segs, err := store.List(ctx, blobkey.Segments(threadID))
		if err != nil {
			return nil, fmt.Errorf("clean %s: %w", threadID, err)
		}
		// Newest first: an interrupted clean leaves a verifiable prefix.
		for i := len(segs) - 1; i >= 0; i-- {
			keys = append(keys, segs[i].Key)
		}
		if opts.Directive != "" {
			keys = append(keys, blobkey.Knowledge(opts.Directive, threadID))
		}
	}
	if opts.Metadata {
		keys = append(keys, blobkey.ThreadJSON(threadID), blobkey.Capabilities(threadID))
	}
	var deleted []string
	for _, k := range keys {
		if _, err := store.Stat(ctx, k); err != nil {
			if errors.Is(err, blobstore.ErrNotFound) {
				continue
			}
			return deleted, fmt.Errorf("clean %s: %w", threadID, err)
		}
		if err := store.Delete(ctx, k); err != nil {
			return deleted, fmt.Errorf("clean %s: %w", threadID, err)
		}
		deleted = append(deleted, k)
	}
	return deleted, nil
}
