// Package launch starts threads from a project directory the way `spool
// thread run` does, for the CLI and the API alike: it refuses, before
// anything is read into the store or registered, a script model outside
// the project or missing, an unknown or unpriced model, a script that does
// not load, an undeclared or missing input and a spend limit past what one
// budget holds; it snapshots the project into a bundle for a root thread
// (ProjectBundle, as the scheduler does); then it starts the
// thread (orchestrator.Start) and says which provider key the thread's
// model needs that this process lacks (workers hold the keys, so that is
// only a warning).
package launch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// ErrRefused marks a start refused as bad usage before anything was
// stored; the error's message is the reason, as the user should read it.
var ErrRefused = errors.New("start refused")

// tagged gives err a sentinel that errors.Is finds, keeping its message.
type tagged struct{ err, tag error }

func (t *tagged) Error() string   { return t.err.Error() }
func (t *tagged) Unwrap() []error { return []error{t.err, t.tag} }

func refused(err error) error { return &tagged{err: err, tag: ErrRefused} }

// Request is a thread to start.
type Request struct {
	orchestrator.StartRequest
	// Project is the project root: a root thread's bundle is built from
	// it, and a script model must resolve inside it. Required.
	Project string
	// UserDir is the user space bundled beside the project (the home
	// directory); "" leaves it out.
	UserDir string
	// Scope, when set, is the tenant the caller is bound to (a bound API
	// token, spool mcp --tenant): the run is Scope's, a Tenant naming
	// another is tenant_forbidden, and a parent of another tenant is
	// answered exactly as a parent that does not exist.
	Scope string
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Started is a thread Start started.
type Started struct {
	Record *spooltype.Record
	// Model is the model the thread runs.
	Model string
	// MissingKey names the provider key (e.g. ANTHROPIC_API_KEY) that
	// Model needs and this process's environment does not set; "" when
	// none is missing. The workers hold the keys, so it is a warning: a
	// worker without it fails the thread at once.
	MissingKey string
}

// CheckScript refuses (ErrRefused) a script:PATH model outside the
// project, or one whose file is not there; it reads nothing of the file.
// Other models pass. Start checks it too; the CLI calls it first, before
// connecting to anything.
func CheckScript(project, model string) error {
	file, ok, err := config.ScriptFile(project, model)
	if errors.Is(err, config.ErrScriptOutside) {
		return refused(err)
	}
	if ok && err == nil {
		fi, err := os.Stat(file)
		if err != nil {
			return refused(fmt.Errorf("model %s: %w", model, err))
		}
		if fi.IsDir() {
			return refused(fmt.Errorf("model %s: %s is a directory, not a script", model, file))
		}
	}
	return nil
}

// CheckBounds refuses (ErrRefused) a start past what a caller may ask
// for: a queue name that is not one (orchestrator.CheckQueueName) and inputs over
// thread.MaxInputsBytes. Start checks it first; a tool's spawn is held
// to it too.
func CheckBounds(req orchestrator.StartRequest) error {
	if req.Queue != "" {
		if err := orchestrator.CheckQueueName(req.Queue); err != nil {
			return refused(err)
		}
	}
	if err := thread.CheckInputs(req.Inputs); err != nil {
		return refused(err)
	}
	return nil
}

// Start checks req, builds a root thread's bundle from the project and
// starts the thread. A refusal wraps ErrRefused; a parent that does not
// exist is orchestrator.ErrParentNotFound; an unknown directive
// directive.ErrNotFound; a spawn or budget past a limit a
// *thread.LimitError.
func Start(ctx context.Context, o *orchestrator.Orchestrator, req Request) (*Started, error) {
	s, err := start(ctx, o, req)
	if errors.Is(err, directive.ErrNotFound) && !req.Graph && req.ParentID == "" {
		if near := directive.NewResolver(req.Project, req.UserDir).Suggest(req.Directive); near != "" && near != req.Directive {
			return nil, &DirectiveMissing{Err: err, Near: near}
		}
	}
	return s, err
}

// DirectiveMissing is a root's directive that was not found (it wraps
// directive.ErrNotFound), with the one its name is a likely misspelling
// of.
type DirectiveMissing struct {
	Err  error
	Near string
}

func (e *DirectiveMissing) Error() string { return e.Err.Error() + "; did you mean " + e.Near + "?" }

func (e *DirectiveMissing) Unwrap() error { return e.Err }

func start(ctx context.Context, o *orchestrator.Orchestrator, req Request) (*Started, error) {
	if req.Logger == nil {
		req.Logger = slog.Default()
	}
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	if err := scopeTenant(&req); err != nil {
		return nil, err
	}
	parent, err := placeThread(ctx, o, &req)
	if err != nil {
		return nil, err
	}
	model, missing := "", ""
	if !req.Graph {
		// A graph run calls no model; its children resolve their own.
		if model, missing, err = checkModel(ctx, o, req.StartRequest, parent); err != nil {
			return nil, err
		}
	}
	rec, err := o.Start(ctx, req.StartRequest)
	if errors.Is(err, directive.ErrInvalidInput) || errors.Is(err, orchestrator.ErrGraphInvalid) {
		return nil, refused(err)
	}
	if err != nil {
		return nil, err
	}
	return &Started{Record: rec, Model: model, MissingKey: missing}, nil
}

// checkRequest refuses what Start can tell wrong from req alone, before
// it reads anything: a missing project, a spend limit past what one
// budget holds, and what CheckBounds and CheckScript refuse.
func checkRequest(req Request) error {
	if req.Project == "" {
		return errors.New("launch: Request.Project is required")
	}
	if l := req.LimitOverrides.Spend; l != nil && *l > orchestrator.MaxAmount {
		return refused(fmt.Errorf("limit spend=%g: at most %g USD (the most one budget holds)", *l, float64(orchestrator.MaxAmount)))
	}
	if err := CheckBounds(req.StartRequest); err != nil {
		return err
	}
	if err := checkTenant(req.StartRequest); err != nil {
		return err
	}
	return CheckScript(req.Project, req.Model)
}

// scopeTenant makes a scoped request's run its scope's tenant, and
// refuses one that names another (tenant_forbidden).
func scopeTenant(req *Request) error {
	if req.Scope == "" {
		return nil
	}
	if req.Tenant != "" && req.Tenant != req.Scope {
		return thread.Refuse(thread.CodeTenantForbidden, "this caller starts runs in its own tenant only")
	}
	req.Tenant = req.Scope
	return nil
}

// checkTenant refuses a bad tenant name or priority (tenant_invalid,
// priority_invalid) before anything is read or bundled; the orchestrator
// decides the rest (a child's tenant is its parent's).
func checkTenant(req orchestrator.StartRequest) error {
	if req.Tenant != "" {
		if err := thread.CheckTenant(req.Tenant); err != nil {
			return err
		}
	}
	if req.Priority != 0 {
		if err := thread.CheckPriority(req.Priority); err != nil {
			return err
		}
	}
	if req.IdempotencyKey != "" {
		return thread.CheckIdempotencyKey(req.IdempotencyKey)
	}
	return nil
}

// placeThread finds where req's thread belongs: a child's parent record,
// which must exist (orchestrator.ErrParentNotFound), or, for a root thread,
// a bundle of the project, which it sets as req.Bundle (a script outside
// the project is refused); the parent is nil then.
func placeThread(ctx context.Context, o *orchestrator.Orchestrator, req *Request) (*spooltype.Record, error) {
	if req.ParentID != "" {
		p, err := o.Record(ctx, req.ParentID)
		if err == nil && req.Scope != "" && p.TenantOrDefault() != req.Scope {
			err = orchestrator.ErrNotFound // another tenant's: as if it did not exist
		}
		if errors.Is(err, orchestrator.ErrNotFound) {
			return nil, &tagged{err: fmt.Errorf("parent thread %q does not exist", req.ParentID), tag: orchestrator.ErrParentNotFound}
		}
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	digest, err := projectBundle(ctx, o, *req)
	if errors.Is(err, config.ErrScriptOutside) {
		return nil, refused(err)
	}
	if err != nil {
		return nil, err
	}
	req.Bundle = digest
	return nil, nil
}

// projectBundle snapshots req's project into the orchestrator's store, as
// ProjectBundle does, and returns the bundle's digest.
func projectBundle(ctx context.Context, o *orchestrator.Orchestrator, req Request) (string, error) {
	extra, err := ProjectScripts(req.Project, req.Model, req.Logger)
	if err != nil {
		return "", err
	}
	return o.BuildBundle(ctx, req.Project, req.UserDir, extra)
}

// checkModel resolves the model the thread will run, as Start does (a
// child inherits its tree's explicit model: ResolveTreeModel), and
// refuses one that no worker could run: an unknown or unpriced model, a
// script that does not load. What it cannot resolve (an unknown
// directive, a bad models.yaml) it leaves to Start to report.
func checkModel(ctx context.Context, o *orchestrator.Orchestrator, req orchestrator.StartRequest, parent *spooltype.Record) (model, missingKey string, err error) {
	bundle, inherited, parentModel := req.Bundle, "", ""
	if parent != nil {
		bundle, inherited, parentModel = parent.Bundle, parent.ModelOverride, parent.Model
	}
	proj, err := o.Project(ctx, bundle)
	if err != nil {
		return "", "", err
	}
	d, err := proj.Directive(req.Directive)
	if err != nil {
		return "", "", nil
	}
	model, err = proj.ResolveTreeModel(d, req.Model, inherited, parentModel)
	if err != nil {
		return "", "", nil
	}
	missingKey, err = checkIn(proj, model)
	if err != nil {
		if req.Model == "" {
			return "", "", refused(fmt.Errorf("directive %s: %w", req.Directive, err))
		}
		return "", "", refused(err)
	}
	return model, missingKey, nil
}

// CheckModel refuses (ErrRefused) a model that no worker could run a
// thread of bundle's project with: unknown, priced neither built in nor in
// the project's pricing.yaml, or a script that does not load. It returns
// the provider key the model needs that is not set here ("" for none).
func CheckModel(ctx context.Context, o *orchestrator.Orchestrator, bundle, model string) (missingKey string, err error) {
	proj, err := o.Project(ctx, bundle)
	if err != nil {
		return "", err
	}
	if missingKey, err = checkIn(proj, model); err != nil {
		return "", refused(err)
	}
	return missingKey, nil
}

// checkIn checks model with proj's pricing and files (provider.Check) and
// names the key it needs that is not set here.
func checkIn(proj *orchestrator.Project, model string) (missingKey string, err error) {
	cfg := provider.ConfigFromEnv().ForBundle(proj.Pricing, proj.ReadFile)
	if err := provider.Check(model, cfg); err != nil {
		return "", err
	}
	return provider.WarnKey(model, cfg), nil
}
