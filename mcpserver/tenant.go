package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spool-run/spool/thread"
)

// TenantInput is show_tenant's input.
type TenantInput struct {
	Tenant string `json:"tenant,omitempty" jsonschema:"the tenant; default: the tenant this server is bound to, else default"`
}

func (h *handlers) showTenant(ctx context.Context, _ *mcp.CallToolRequest, in TenantInput) (*mcp.CallToolResult, any, error) {
	name := in.Tenant
	if name == "" {
		name = thread.TenantOrDefault(h.cfg.Tenant)
	}
	if err := thread.CheckTenant(name); err != nil {
		return nil, nil, err
	}
	if h.cfg.Tenant != "" && name != h.cfg.Tenant {
		return nil, nil, tenantNotFound(name) // another tenant's: as if it did not exist
	}
	v, err := h.cfg.ShowTenant(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	return nil, v, nil
}

// tenantNotFound is the answer for a tenant that does not exist, or that
// a bound server may not see.
func tenantNotFound(name string) error {
	return thread.Refuse(thread.CodeTenantNotFound, "tenant %q not found", name)
}
