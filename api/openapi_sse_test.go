package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/api"
)

// TestOpenAPIEventStreamsNameTheirSchemas: every text/event-stream
// response names, by event name, the schema of its messages' data
// (x-sse-events), each a schema of the document; and the document says
// its license.
func TestOpenAPIEventStreamsNameTheirSchemas(t *testing.T) {
	t.Parallel()
	var doc struct {
		Info struct {
			License struct {
				Name string `json:"name"`
			} `json:"license"`
		} `json:"info"`
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Content map[string]struct {
					Events map[string]struct {
						Ref string `json:"$ref"`
					} `json:"x-sse-events"`
				} `json:"content"`
			} `json:"responses"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(api.OpenAPI, &doc))
	require.NotEmpty(t, doc.Info.License.Name, "info.license")
	streams := 0
	for path, ops := range doc.Paths {
		for method, op := range ops {
			for status, r := range op.Responses {
				mt, ok := r.Content["text/event-stream"]
				if !ok {
					continue
				}
				streams++
				where := method + " " + path + " " + status
				got := map[string]string{}
				for name, ev := range mt.Events {
					schema, ok := strings.CutPrefix(ev.Ref, "#/components/schemas/")
					require.True(t, ok, "%s: event %s: $ref %q", where, name, ev.Ref)
					require.Contains(t, doc.Components.Schemas, schema, "%s: event %s", where, name)
					got[name] = schema
				}
				require.NotEmpty(t, got, where)
				if path == "/v1/threads/{id}/events" {
					require.Equal(t, map[string]string{"message": "Event", "end": "End", "error": "Problem", "delta": "Delta"}, got, where)
				}
			}
		}
	}
	require.GreaterOrEqual(t, streams, 1, "the transcript's event stream")
}

// TestOpenAPIEventStreamDeltasParameter: the transcript's event stream
// documents ?deltas= as the boolean the server reads (deltasParam), and
// the Delta schema requires what a spooltype.Delta always has.
func TestOpenAPIEventStreamDeltasParameter(t *testing.T) {
	t.Parallel()
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name   string `json:"name"`
				In     string `json:"in"`
				Schema struct {
					Type string `json:"type"`
				} `json:"schema"`
			} `json:"parameters"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Required []string `json:"required"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(api.OpenAPI, &doc))
	found := false
	for _, p := range doc.Paths["/v1/threads/{id}/events"]["get"].Parameters {
		if p.Name == "deltas" {
			found = true
			require.Equal(t, "query", p.In)
			require.Equal(t, "boolean", p.Schema.Type)
		}
	}
	require.True(t, found, "the deltas query parameter")
	require.ElementsMatch(t, []string{"turn", "offset", "text"}, doc.Components.Schemas["Delta"].Required)
}
