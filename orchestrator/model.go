package orchestrator

import (
	"errors"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/directive"
)

// ResolveModel is the model a thread of directive d runs: model (--model,
// or a spawn's model) when set, else the directive's model id, else its
// tier through models.yaml; a child whose directive names no model runs on
// its parent's, parentModel ("" for a root).
func (p *Project) ResolveModel(d *directive.Directive, model, parentModel string) (string, error) {
	m, err := p.Models.ResolveModel(model, d.Model.ID, d.Model.Tier, d.Model.FallbackID, d.Model.Fallback)
	if errors.Is(err, config.ErrNoModel) && parentModel != "" && d.Model.ID == "" && d.Model.Tier == "" {
		return parentModel, nil
	}
	return m, err
}

// ResolveTreeModel is ResolveModel with the tree's explicit model: a
// thread runs explicit (--model, or its spawn's model) when set, else its
// directive's model id, else inherited — the explicit model its tree was
// started with (`thread run --model script:X` runs the children on X too,
// unless their directive or spawn names a model) — else its directive's
// tier, else, when its directive names none, its parent's model.
func (p *Project) ResolveTreeModel(d *directive.Directive, explicit, inherited, parentModel string) (string, error) {
	if explicit == "" && d.Model.ID == "" && inherited != "" {
		return inherited, nil
	}
	return p.ResolveModel(d, explicit, parentModel)
}
