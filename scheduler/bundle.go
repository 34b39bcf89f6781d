package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/directive"
)

// ProjectBundle snapshots a project's .ai/ items into the blob store, plus
// the provider scripts a thread run with model can reach (model itself when
// it is script:PATH, and every script tier of models.yaml), and returns the
// bundle digest for orchestrator.StartRequest.Bundle. userDir is the user
// space (the home directory; "" skips it). A missing script named by model
// is an error; a missing tier script is logged and left out. A script that
// resolves outside the project, named by model or by a tier, is an error
// wrapping config.ErrScriptOutside, and nothing is read or stored.
//
// It is what `spool thread run` does before starting a root thread, so a
// scheduled thread sees the project exactly as a thread run by hand would.
func ProjectBundle(ctx context.Context, store blobstore.Store, project, userDir, model string, log *slog.Logger) (string, error) {
	if log == nil {
		log = slog.Default()
	}
	extra := map[string][]byte{}
	addScript := func(m string) error {
		file, ok, err := config.ScriptFile(project, m)
		if !ok || err != nil {
			return err
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("model %s: %w", m, err)
		}
		p, _ := config.ScriptPath(m)
		extra[p] = b
		return nil
	}
	if err := addScript(model); err != nil {
		return "", err
	}
	if models, err := config.LoadModels(os.DirFS(project)); err == nil {
		for tier, m := range models.Tiers {
			err := addScript(m)
			switch {
			case errors.Is(err, config.ErrScriptOutside):
				return "", fmt.Errorf("models.yaml tier %s: %w", tier, err)
			case err != nil:
				log.Warn("models.yaml tier script not bundled", "error", err)
			}
		}
	}
	return directive.BuildBundle(ctx, store, project, userDir, extra)
}
