package config

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// ScriptPrefix marks a model id that is a scripted-provider script path,
// relative to the project root ("script:scripts/all.yaml").
const ScriptPrefix = "script:"

// ErrNoModel is returned by ResolveModel when no model can be chosen.
var ErrNoModel = errors.New("no model")

// Models is models.yaml: the tier → model id map.
type Models struct {
	// Tiers maps a tier name to a model id or "script:PATH". Defaults:
	// haiku and fast → claude-haiku-4-5, sonnet and general →
	// claude-sonnet-4-5, opus → claude-opus-4-1; the file's entries
	// replace or add to these.
	Tiers map[string]string
}

// DefaultModels is the tier map a project without models.yaml gets.
func DefaultModels() Models {
	return Models{Tiers: map[string]string{
		"haiku":   "claude-haiku-4-5",
		"fast":    "claude-haiku-4-5",
		"sonnet":  "claude-sonnet-4-5",
		"general": "claude-sonnet-4-5",
		"opus":    "claude-opus-4-1",
	}}
}

// LoadModels reads models.yaml from the project fsys.
func LoadModels(fsys fs.FS) (Models, error) {
	return load(fsys, DefaultModels(), ParseModels, agentPaths("models")...)
}

// ParseModels parses models.yaml: `tiers: {name: model-id | script:PATH}`,
// at the top level or under "models:".
func ParseModels(path string, data []byte) (Models, error) {
	m := DefaultModels()
	var doc struct {
		Tiers  map[string]string `yaml:"tiers"`
		Models *struct {
			Tiers map[string]string `yaml:"tiers"`
		} `yaml:"models"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return m, fmt.Errorf("%s: %w", path, err)
	}
	tiers := doc.Tiers
	if tiers == nil && doc.Models != nil {
		tiers = doc.Models.Tiers
	}
	for k, v := range tiers {
		if strings.TrimSpace(v) == "" {
			return m, fmt.Errorf("%s: tiers.%s: empty model id", path, k)
		}
		m.Tiers[k] = strings.TrimSpace(v)
	}
	return m, nil
}

// ResolveModel picks a thread's model as the CLI contract says: explicit
// (--model or the spawn call's model), else the directive's model id, else
// its tier through the map, else its fallback id, else its fallback tier.
// An unknown tier is an error naming it.
func (m Models) ResolveModel(explicit, id, tier, fallbackID, fallbackTier string) (string, error) {
	switch {
	case explicit != "":
		return explicit, nil
	case id != "":
		return id, nil
	}
	if tier != "" {
		if v, ok := m.Tiers[tier]; ok {
			return v, nil
		}
	}
	if fallbackID != "" {
		return fallbackID, nil
	}
	if fallbackTier != "" {
		if v, ok := m.Tiers[fallbackTier]; ok {
			return v, nil
		}
	}
	if tier != "" {
		return "", fmt.Errorf("model tier %q is not in models.yaml: %w", tier, ErrNoModel)
	}
	return "", fmt.Errorf("%w: the directive names none (<model id=\"...\"/> or <model tier=\"...\"/> in its metadata) and none was given "+
		"(--model ID, e.g. claude-sonnet-4-5, or script:PATH for the offline scripted provider)", ErrNoModel)
}

// ScriptPath returns the project-relative script path of a "script:PATH"
// model id.
func ScriptPath(model string) (string, bool) {
	p, ok := strings.CutPrefix(model, ScriptPrefix)
	return p, ok && p != ""
}

// ErrScriptOutside is the error of ScriptFile for a script path that
// resolves outside the project root.
var ErrScriptOutside = errors.New("scripts must be inside the project")

// ScriptFile returns the file of a "script:PATH" model id (ok is false for
// any other model). PATH is relative to the project root, or absolute; in
// both cases it must resolve inside the project root once every symlink is
// followed, so that no model id (from --model, models.yaml, a schedule)
// can read a host file into the shared store: a path outside is an error
// wrapping ErrScriptOutside, which names the path but never reads it. A
// path inside that does not exist is returned as it is, for the caller's
// read to report.
func ScriptFile(project, model string) (file string, ok bool, err error) {
	p, ok := ScriptPath(model)
	if !ok {
		return "", false, nil
	}
	root, err := filepath.Abs(project)
	if err != nil {
		return "", true, fmt.Errorf("project %s: %w", project, err)
	}
	if resolved, err := filepath.EvalSymlinks(root); err == nil {
		root = resolved
	}
	file = p
	if !filepath.IsAbs(file) {
		file = filepath.Join(root, file)
	}
	resolved, err := filepath.EvalSymlinks(file)
	if err != nil {
		resolved = filepath.Clean(file) // missing: judge the path as written
	}
	if rel, err := filepath.Rel(root, resolved); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", true, fmt.Errorf("model %s: the script resolves outside the project %s (%w)", model, project, ErrScriptOutside)
	}
	return resolved, true, nil
}
