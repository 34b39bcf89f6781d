package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// hookActions are the hooks' action runner (hooks.ActionRunner) of a
// thread. Hooks act as the thread: every item action is checked against
// the thread's capabilities, as the model's tool calls are, and a refusal
// is the action's error (recorded in the hook_fired event; the thread
// runs on). Fail closed, like the rest of the capability model: a
// directive whose hooks load knowledge declares
// <load><knowledge>...</knowledge></load>, one whose hooks search
// declares <search>, and user and project hooks get no more than the
// thread they run in (the same holds for their execute actions). It
// holds what the actions use: the capabilities, the project's bundle and
// directives, the records and knowledge renders of other threads, and
// the thread's tools; a session has one.
type hookActions struct {
	// capabilities are the thread's; dropped are those its directive
	// asked for and its parent does not hold (droppedNote).
	capabilities []string
	dropped      []string
	proj         *orchestrator.Project
	reg          threadRecords
	// knowledge renders a thread's knowledge from its transcript
	// (orchestrator.Knowledge).
	knowledge func(ctx context.Context, rec *registry.Record) ([]byte, error)
	tools     *toolRunner
}

// Load returns a knowledge or directive item's content for context
// injection; the thread must hold rye.load.<item type>.<item id>. Knowledge
// ids resolve to a thread's knowledge render for "agent/threads/<thread
// id>" or "agent/threads/<directive>/<thread id>" (where the reference
// keeps it), else under .ai/knowledge/ in the bundle.
func (h *hookActions) Load(ctx context.Context, itemType, itemID string) (string, error) {
	if need := thread.Capability(thread.PrimaryLoad, itemType, itemID); !thread.Match(h.capabilities, need) {
		return "", fmt.Errorf("load %s %s: capability %s not held%s", itemType, itemID, need, droppedNote(h.dropped, need))
	}
	switch itemType {
	case "knowledge":
		if rest, ok := strings.CutPrefix(itemID, "agent/threads/"); ok {
			text, found, err := h.threadKnowledge(ctx, rest)
			if err != nil || found {
				return text, err
			}
		}
		for _, p := range []string{".ai/knowledge/" + itemID + ".md", ".ai/knowledge/" + itemID} {
			if b, err := fs.ReadFile(h.proj.Bundle, p); err == nil {
				return string(b), nil
			}
		}
		return "", fmt.Errorf("knowledge %q not found", itemID)
	case "directive":
		d, err := h.proj.Directive(itemID)
		if err != nil {
			return "", err
		}
		return d.Prompt, nil
	}
	return "", fmt.Errorf("load: unsupported item_type %q", itemType)
}

// threadKnowledge returns the verified knowledge render of the thread that
// ref names (see knowledgeThreadIDs), read at blobkey.Knowledge of
// the thread's directive, which the registry knows. found is false when
// no thread has that id.
func (h *hookActions) threadKnowledge(ctx context.Context, ref string) (text string, found bool, err error) {
	ids := knowledgeThreadIDs(ref)
	recs, err := h.reg.GetMany(ctx, ids)
	if err != nil {
		return "", false, err
	}
	byID := make(map[string]*registry.Record, len(recs))
	for _, r := range recs {
		byID[r.ThreadID] = r
	}
	for _, id := range ids {
		rec := byID[id]
		if rec == nil || (id != ref && rec.Directive+"/"+rec.ThreadID != ref) {
			continue
		}
		// Rendered now from the thread's transcript, read strictly: what
		// goes into the model's context is held to the transcript's
		// standard.
		body, err := h.knowledge(ctx, rec)
		if err != nil {
			return "", true, err
		}
		return string(body), true, nil
	}
	return "", false, nil
}

// knowledgeThreadIDs are the thread ids a knowledge reference under
// agent/threads/ may name, in the order they are tried: the whole
// reference (thread ids hold the directive's slashes: "t/x-1739820456-ab"),
// then what follows each "/", for "<directive>/<thread id>".
func knowledgeThreadIDs(ref string) []string {
	ids := []string{ref}
	for i := 0; i < len(ref); i++ {
		if ref[i] == '/' && i+1 < len(ref) {
			ids = append(ids, ref[i+1:])
		}
	}
	return ids
}

// Execute runs a tool (as the thread, under its capabilities: the check of
// the model's tool calls) or loads a knowledge or directive item, for hooks
// whose action is execute.
func (h *hookActions) Execute(ctx context.Context, itemType, itemID string, params map[string]any) (string, error) {
	switch itemType {
	case "knowledge", "directive":
		return h.Load(ctx, itemType, itemID)
	case "tool":
		id := normalizeTool(itemID)
		if err := h.tools.check(id); err != nil {
			return "", fmt.Errorf("hook tool %s: %w", id, err)
		}
		in, _ := json.Marshal(params)
		res, ok, err := h.tools.run(ctx, id, in)
		if !ok {
			return "", fmt.Errorf("hook tool %s: unknown tool", id)
		}
		if err != nil {
			return "", err
		}
		if res.IsError {
			return "", fmt.Errorf("hook tool %s: %s", id, res.Output)
		}
		return res.Output, nil
	}
	return "", fmt.Errorf("execute: unsupported item_type %q", itemType)
}

// Search lists the items of itemType in the bundle whose path contains the
// query and that the thread may search (rye.search.<item type>.<item id>).
// When there are hits and the thread may search none of them, the search
// is refused with an error naming the capability of the first.
func (h *hookActions) Search(ctx context.Context, itemType, query string) (string, error) {
	root := ".ai/" + itemType
	var hits []string
	denied := ""
	_ = fs.WalkDir(h.proj.Bundle, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(p, query) {
			return nil
		}
		id := strings.TrimSuffix(strings.TrimPrefix(p, root+"/"), ".md")
		if need := thread.Capability(thread.PrimarySearch, itemType, id); !thread.Match(h.capabilities, need) {
			if denied == "" {
				denied = need
			}
			return nil
		}
		hits = append(hits, p)
		return nil
	})
	if len(hits) == 0 && denied != "" {
		return "", fmt.Errorf("search %s %q: capability %s not held%s", itemType, query, denied, droppedNote(h.dropped, denied))
	}
	return strings.Join(hits, "\n"), nil
}
