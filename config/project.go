package config

import "io/fs"

// Project is all of a project's agent configuration.
type Project struct {
	Resilience   Resilience
	Coordination Coordination
	Models       Models
	// Approvals gates tool calls on a person's decision; nil: none.
	Approvals *Approvals
	// RateLimits holds model calls to fleet-wide limits; nil: none.
	RateLimits *RateLimits
	// MCP declares the MCP servers whose tools threads may call; nil:
	// none.
	MCP *MCP
}

// Default is the configuration of a project without config files.
func Default() *Project {
	return &Project{Resilience: DefaultResilience(), Coordination: DefaultCoordination(), Models: DefaultModels()}
}

// Load reads resilience.yaml, coordination.yaml, models.yaml,
// approvals.yaml, rate_limits.yaml and mcp.yaml from the
// project fsys (a directory or a directive bundle). fsys may be nil.
func Load(fsys fs.FS) (*Project, error) {
	r, err := LoadResilience(fsys)
	if err != nil {
		return nil, err
	}
	c, err := LoadCoordination(fsys)
	if err != nil {
		return nil, err
	}
	m, err := LoadModels(fsys)
	if err != nil {
		return nil, err
	}
	a, err := LoadApprovals(fsys)
	if err != nil {
		return nil, err
	}
	rl, err := LoadRateLimits(fsys)
	if err != nil {
		return nil, err
	}
	mcp, err := LoadMCP(fsys)
	if err != nil {
		return nil, err
	}
	return &Project{Resilience: r, Coordination: c, Models: m, Approvals: a, RateLimits: rl, MCP: mcp}, nil
}
