package launch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/directive"
)

// ProjectBundle snapshots a project's .ai/ items into the blob store, plus
// the provider scripts a thread run with model can reach (model itself when
// it is script:PATH, every script tier of models.yaml, and every script a
// project directive names as its <model id>), and returns the bundle digest
// for orchestrator.StartRequest.Bundle. userDir is the user space (the home
// directory; "" skips it). A missing script named by model is an error; a
// missing tier or directive script is logged and left out (a thread that
// runs it fails to start with a message naming it). A script that resolves
// outside the project, named by model, a tier or a directive, is an error
// wrapping config.ErrScriptOutside, and nothing is read or stored.
//
// It is what `spool thread run` does before starting a root thread, so a
// scheduled thread sees the project exactly as a thread run by hand would.
func ProjectBundle(ctx context.Context, store blobstore.Store, project, userDir, model string, log *slog.Logger) (string, error) {
	extra, err := ProjectScripts(project, model, log)
	if err != nil {
		return "", err
	}
	return directive.BuildBundle(ctx, store, project, userDir, extra)
}

// ProjectScripts reads the provider scripts that ProjectBundle bundles
// with a project's .ai/ items for a thread run with model, by their paths
// in the bundle, with ProjectBundle's errors; the orchestrator's
// BuildBundle stores them with the project.
func ProjectScripts(project, model string, log *slog.Logger) (map[string][]byte, error) {
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
		return nil, err
	}
	if models, err := config.LoadModels(os.DirFS(project)); err == nil {
		for tier, m := range models.Tiers {
			err := addScript(m)
			switch {
			case errors.Is(err, config.ErrScriptOutside):
				return nil, fmt.Errorf("models.yaml tier %s: %w", tier, err)
			case err != nil:
				log.Warn("models.yaml tier script not bundled", "error", err)
			}
		}
	}
	for file, m := range directiveScripts(project, log) {
		err := addScript(m)
		switch {
		case errors.Is(err, config.ErrScriptOutside):
			return nil, fmt.Errorf("directive %s: %w", file, err)
		case err != nil:
			log.Warn("directive's script model not bundled", "directive", file, "error", err)
		}
	}
	return extra, nil
}

// directiveScripts maps each project directive (its path under the
// directives directory) that names a script model by id to that model.
// Directives that do not parse are skipped: starting one reports why.
func directiveScripts(project string, log *slog.Logger) map[string]string {
	root := filepath.Join(project, ".ai", "directives")
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(e.Name(), ".md") {
			return nil //nolint:nilerr // an unreadable entry is skipped, as BuildBundle skips it
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil //nolint:nilerr // see above
		}
		d, err := directive.Parse(path, data)
		if err != nil {
			return nil //nolint:nilerr // starting the directive reports its parse error
		}
		if _, ok := config.ScriptPath(d.Model.ID); ok {
			rel, _ := filepath.Rel(root, path)
			out[filepath.ToSlash(rel)] = d.Model.ID
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("reading directives for script models", "error", err)
	}
	return out
}
