package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// failTools answers every tool call with a tool error that says why spool
// cannot serve it (Config.Unavailable), and passes everything else (the
// handshake, the tool list) through: a client that started `spool mcp`
// while Redis was down lists the tools and reads the reason on each call,
// rather than a server that died before it answered.
func failTools(why error) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != "tools/call" {
				return next(ctx, method, req)
			}
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{
				Text: "spool cannot serve this call: " + why.Error() + " (restart spool mcp once it is fixed)"}}}, nil
		}
	}
}
