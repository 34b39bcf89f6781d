package transcript

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/spool-run/spool/blobstore"
)

// Match is one chain-search hit. Its JSON is what `spool thread search
// --json` and the orchestrator tool's chain_search print.
type Match struct {
	ThreadID string `json:"thread_id"`
	Seq      int64  `json:"seq"`        // event seq
	Type     string `json:"event_type"` // event type
	Line     int    `json:"line"`       // 1-based line within the event's text
	Text     string `json:"text"`       // that line
}

// SearchText is the text of an event that search looks at: the message,
// output or text fields of model, tool and error events, else the raw
// payload JSON.
func SearchText(ev Event) string {
	switch ev.Type {
	case TypeCognitionIn:
		var p CognitionIn
		if ev.Decode(&p) == nil {
			return p.Content
		}
	case TypeCognitionOut:
		var p CognitionOut
		if ev.Decode(&p) == nil {
			parts := []string{p.Content}
			for _, c := range p.ToolCalls {
				parts = append(parts, c.Name+" "+string(c.Input))
			}
			return strings.Join(parts, "\n")
		}
	case TypeToolCallResult:
		var p ToolCallResult
		if ev.Decode(&p) == nil {
			return p.Output
		}
	case TypeTokenDelta:
		return "" // the same text is in cognition_out
	case TypeThreadError:
		var p Error
		if ev.Decode(&p) == nil {
			var parts []string
			for _, f := range []string{p.Class, p.Code, p.Message} {
				if f != "" {
					parts = append(parts, f)
				}
			}
			return strings.Join(parts, " ")
		}
	}
	return string(ev.Payload)
}

// ChainSearch runs re over the transcripts of threadIDs (a continuation
// chain, root first), line by line within each event's SearchText, and
// returns up to limit matches (limit <= 0: 50). Transcripts are read leniently
// (a damaged thread still yields its intact prefix); a thread with no
// transcript contributes nothing.
func ChainSearch(ctx context.Context, store blobstore.Store, keyring *Keyring, threadIDs []string, re *regexp.Regexp, limit int) ([]Match, error) {
	if re == nil {
		return nil, fmt.Errorf("chain search: no pattern")
	}
	if limit <= 0 {
		limit = 50
	}
	var out []Match
	for _, id := range threadIDs {
		tr, err := Read(ctx, store, id, keyring, Lenient)
		if err != nil {
			return out, fmt.Errorf("chain search %s: %w", id, err)
		}
		for _, ev := range tr.Events {
			if ev.Type == TypeCheckpoint {
				continue
			}
			for i, line := range strings.Split(SearchText(ev), "\n") {
				if re.MatchString(line) {
					out = append(out, Match{ThreadID: id, Seq: ev.Seq, Type: ev.Type, Line: i + 1, Text: line})
					if len(out) >= limit {
						return out, nil
					}
				}
			}
		}
	}
	return out, nil
}
