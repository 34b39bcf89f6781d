package mcpclient

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperServer())
	}
	goleak.VerifyTestMain(m)
}

// helperEnv makes the test binary a stdio MCP server written with the
// SDK's server side, whose tools exercise what the pool must handle: text,
// an image, structured content, a tool error, a slow call, a crash in
// the middle of a call, the server's environment. Each start appends a
// line to $HELPER_STARTS. The real servers nobody here wrote are in e2e.
const helperEnv = "SPOOL_MCPCLIENT_TEST_SERVER"

// tinyPNG is a 1x1 PNG.
var tinyPNG = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")

type echoIn struct {
	Message string `json:"message"`
}

type nameIn struct {
	Name string `json:"name"`
}

type sleepIn struct {
	Seconds float64 `json:"seconds"`
}

type weather struct {
	Temperature float64 `json:"temperature"`
	Conditions  string  `json:"conditions"`
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func helperServer() int {
	if f := os.Getenv("HELPER_STARTS"); f != "" {
		fh, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(fh, os.Getpid())
			fh.Close()
		}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "helper", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echoes message"}, func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return text("echo: " + in.Message), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "env", Description: "One variable of the server's environment"}, func(_ context.Context, _ *mcp.CallToolRequest, in nameIn) (*mcp.CallToolResult, any, error) {
		v, ok := os.LookupEnv(in.Name)
		return text(fmt.Sprintf("%s=%q set=%v", in.Name, v, ok)), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "image", Description: "A tiny image and a caption"}, func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a dot"}, &mcp.ImageContent{Data: tinyPNG, MIMEType: "image/png"}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "weather", Description: "Structured content, also as text"}, func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, weather, error) {
		return nil, weather{Temperature: 21.5, Conditions: "clear"}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "structured-only", Description: "Structured content without its text"}, func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "see structured"}}, StructuredContent: map[string]any{"n": 7}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "A tool error"}, func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, any, error) {
		return nil, nil, fmt.Errorf("the disk is full")
	})
	mcp.AddTool(s, &mcp.Tool{Name: "sleep", Description: "Answers after a while"}, func(ctx context.Context, _ *mcp.CallToolRequest, in sleepIn) (*mcp.CallToolResult, any, error) {
		select {
		case <-time.After(time.Duration(in.Seconds * float64(time.Second))):
			return text("slept"), nil, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	})
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "Exits in the middle of the call"}, func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, any, error) {
		fmt.Fprintln(os.Stderr, "helper: crashing as asked")
		time.Sleep(100 * time.Millisecond)
		os.Exit(3)
		return nil, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "The server's process id"}, func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, any, error) {
		return text(fmt.Sprint(os.Getpid())), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "bad.name", Description: "A name that cannot be a tool id"}, func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, any, error) {
		return text("unreachable"), nil, nil
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}
