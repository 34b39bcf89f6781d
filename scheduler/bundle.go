package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/directive"
)

// ProjectBundle snapshots a project's .ai/ items into the blob store, plus
// the provider scripts a thread run with model can reach (model itself when
// it is script:PATH, and every script tier of models.yaml), and returns the
// bundle digest for orchestrator.StartRequest.Bundle. userDir is the user
// space (the home directory; "" skips it). A missing script named by model
// is an error; a missing tier script is logged and left out.
//
// It is what `spool thread run` does before starting a root thread, so a
// scheduled thread sees the project exactly as a thread run by hand would.
func ProjectBundle(ctx context.Context, store blobstore.Store, project, userDir, model string, log *slog.Logger) (string, error) {
	if log == nil {
		log = slog.Default()
	}
	extra := map[string][]byte{}
	addScript := func(m string) error {
		p, ok := config.ScriptPath(m)
		if !ok {
			return nil
		}
		full := p
		if !filepath.IsAbs(p) {
			full = filepath.Join(project, p)
		}
		b, err := os.ReadFile(full)
		if err != nil {
			return fmt.Errorf("model %s: %w", m, err)
		}
		extra[p] = b
		return nil
	}
	if err := addScript(model); err != nil {
		return "", err
	}
	if models, err := config.LoadModels(os.DirFS(project)); err == nil {
		for _, m := range models.Tiers {
			if err := addScript(m); err != nil {
				log.Warn("models.yaml tier script not bundled", "error", err)
			}
		}
	}
	return directive.BuildBundle(ctx, store, project, userDir, extra)
}
