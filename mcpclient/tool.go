package mcpclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/tools"
)

// tool is one tool of an MCP server, as the thread's tool mcp/S/T.
type tool struct {
	srv     *server
	name    string // the server's name for it
	timeout time.Duration
	def     thread.ToolDef
}

func (t *tool) Def() thread.ToolDef { return t.def }

// Run calls the tool on its server (package doc: which failures the model
// reads and which fail the activation).
func (t *tool) Run(ctx context.Context, env *tools.Env, input json.RawMessage) (tools.Result, error) {
	args := json.RawMessage(`{}`)
	if in := bytes.TrimSpace(input); len(in) > 0 && string(in) != "null" {
		if in[0] != '{' || !json.Valid(in) {
			return tools.Result{Output: t.def.Name + " takes a JSON object of arguments", IsError: true}, nil
		}
		args = in
	}
	start := time.Now()
	res, failure, err := t.srv.live().call(ctx, t.name, args, t.timeout)
	if err != nil {
		return tools.Result{}, err
	}
	if env != nil && env.Logger != nil {
		env.Logger.Debug("mcp call", "tool", t.def.Name, "elapsed", time.Since(start), "failure", failure)
	}
	if failure != "" {
		return tools.Result{Output: failure, IsError: true}, nil
	}
	return mapResult(ctx, env, res)
}

// mapResult turns a CallToolResult into the model's tool result (package
// doc, "Results"). Only a blob store failure is an error.
func mapResult(ctx context.Context, env *tools.Env, res *mcp.CallToolResult) (tools.Result, error) {
	var parts, texts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
			texts = append(texts, c.Text)
		case *mcp.ImageContent:
			line, err := storeBlob(ctx, env, "image", c.MIMEType, c.Data)
			if err != nil {
				return tools.Result{}, err
			}
			parts = append(parts, line)
		case *mcp.AudioContent:
			line, err := storeBlob(ctx, env, "audio", c.MIMEType, c.Data)
			if err != nil {
				return tools.Result{}, err
			}
			parts = append(parts, line)
		case *mcp.ResourceLink:
			parts = append(parts, resourceLine("resource link", c.URI, c.Name, c.MIMEType))
		case *mcp.EmbeddedResource:
			r := c.Resource
			switch {
			case r == nil:
			case r.Blob != nil:
				line, err := storeBlob(ctx, env, "resource "+r.URI, r.MIMEType, r.Blob)
				if err != nil {
					return tools.Result{}, err
				}
				parts = append(parts, line)
			default:
				parts = append(parts, resourceLine("resource", r.URI, "", r.MIMEType)+"\n"+r.Text)
			}
		default:
			b, _ := json.Marshal(c)
			parts = append(parts, string(b))
		}
	}
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err == nil && !holdsJSON(texts, res.StructuredContent) {
			parts = append(parts, string(b))
		}
	}
	return tools.Result{Output: strings.Join(parts, "\n"), IsError: res.IsError}, nil
}

// holdsJSON reports whether one of texts is v as JSON (servers send
// structured content twice, the spec says, once as text).
func holdsJSON(texts []string, v any) bool {
	want, err := json.Marshal(v)
	if err != nil {
		return false
	}
	var norm any
	if json.Unmarshal(want, &norm) != nil {
		return false
	}
	for _, t := range texts {
		var got any
		if json.Unmarshal([]byte(t), &got) == nil && cmp.Equal(got, norm) {
			return true
		}
	}
	return false
}

func resourceLine(kind, uri, name, mimeType string) string {
	var b strings.Builder
	b.WriteString("[" + kind + " " + uri)
	if name != "" {
		b.WriteString(" (" + name + ")")
	}
	if mimeType != "" {
		b.WriteString(", " + mimeType)
	}
	b.WriteString("]")
	return b.String()
}

// storeBlob keeps binary content as an artifact of the calling thread,
// named by its hash (a retried call writes the same key), and returns the
// line naming it.
func storeBlob(ctx context.Context, env *tools.Env, kind, mimeType string, data []byte) (string, error) {
	if env == nil || env.Store == nil || env.ThreadID == "" {
		return fmt.Sprintf("[%s %s, %d bytes, not kept: no store]", kind, mimeType, len(data)), nil
	}
	sum := sha256.Sum256(data)
	key := blobkey.MCPContent(env.ThreadID, hex.EncodeToString(sum[:16]), extension(mimeType))
	if err := env.Store.Put(ctx, key, data); err != nil {
		return "", fmt.Errorf("store the %s of an MCP result at %s: %w", kind, key, err)
	}
	return fmt.Sprintf("[%s %s, %d bytes, kept as artifact %s]", kind, mimeType, len(data), key), nil
}

// extension is a file extension for a MIME type: the common ones by
// hand (mime's table varies by system), else mime's, else ".bin".
func extension(mimeType string) string {
	mt, _, _ := mime.ParseMediaType(mimeType)
	switch mt {
	case "image/png":
		return ".png"
	case "image/jpeg":
		return ".jpg"
	case "image/gif":
		return ".gif"
	case "image/webp":
		return ".webp"
	case "audio/wav", "audio/x-wav":
		return ".wav"
	case "audio/mpeg":
		return ".mp3"
	case "application/pdf":
		return ".pdf"
	}
	if exts, _ := mime.ExtensionsByType(mt); len(exts) > 0 {
		return exts[0]
	}
	return ".bin"
}
