package hooks

import (
	"errors"
	"fmt"
	"io/fs"

	"gopkg.in/yaml.v3"
)

// Hook file locations inside a project or user root.
const (
	HooksPath       = ".ai/config/agent/hooks.yaml"
	LegacyHooksPath = ".ai/config/hooks.yaml"
)

type yamlHook struct {
	ID        string     `yaml:"id"`
	Event     string     `yaml:"event"`
	Condition *Condition `yaml:"condition"`
	Action    struct {
		Primary  string         `yaml:"primary"`
		ItemType string         `yaml:"item_type"`
		ItemID   string         `yaml:"item_id"`
		Params   map[string]any `yaml:"params"`
	} `yaml:"action"`
	Description string `yaml:"description"`
}

// ParseYAML parses a hooks.yaml (`hooks: [...]`, or a bare list) into
// hooks of the given layer, validating each; path names the file in errors.
func ParseYAML(path string, data []byte, layer int) ([]Hook, error) {
	var doc struct {
		Hooks []yamlHook `yaml:"hooks"`
	}
	var node yaml.Node
	if err := yaml.Unmarshal(data, &node); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(node.Content) == 0 { // empty file
		return nil, nil
	}
	var err error
	if node.Content[0].Kind == yaml.SequenceNode {
		err = node.Content[0].Decode(&doc.Hooks)
	} else {
		err = node.Decode(&doc)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := make([]Hook, 0, len(doc.Hooks))
	for i, y := range doc.Hooks {
		h := Hook{
			ID: y.ID, Event: y.Event, Condition: y.Condition, Description: y.Description, Layer: layer,
			Action: Action{Primary: y.Action.Primary, ItemType: y.Action.ItemType, ItemID: y.Action.ItemID, Params: y.Action.Params},
		}
		if h.ID == "" {
			h.ID = fmt.Sprintf("hook_%d", i+1)
		}
		if err := h.Validate(); err != nil {
			return nil, fmt.Errorf("%s: hooks[%d]: %w", path, i, err)
		}
		out = append(out, h)
	}
	return out, nil
}

// Load reads hooks.yaml of one layer from root (a directory tree rooted at
// the project or user home, or a directive bundle sub-tree): HooksPath, else
// LegacyHooksPath. A missing file is no hooks.
func Load(fsys fs.FS, layer int) ([]Hook, error) {
	if fsys == nil {
		return nil, nil
	}
	for _, p := range []string{HooksPath, LegacyHooksPath} {
		data, err := fs.ReadFile(fsys, p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		return ParseYAML(p, data, layer)
	}
	return nil, nil
}
