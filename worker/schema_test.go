package worker

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOrchestrationSchemasFromTypes: the input schemas made from the
// tools' Go types are, byte for byte, the ones the model was offered
// when they were written by hand; and a call decodes what the schema
// leaves out (directive_id, cascade) too.
func TestOrchestrationSchemasFromTypes(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		threadDirectiveID: `{"type":"object","properties":{"directive_name":{"type":"string"},"inputs":{"type":"object"},"async":{"type":"boolean"},"limit_overrides":{"type":"object"},"reserve":{"type":"boolean"},"model":{"type":"string"}},"required":["directive_name"]}`,
		orchestratorID:    `{"type":"object","properties":{"operation":{"type":"string","enum":["wait_threads","cancel_thread","get_status","list_children","get_chain","chain_search","resume_thread","read_transcript","send_graph_message"]},"thread_id":{"type":"string"},"thread_ids":{"type":"array","items":{"type":"string"}},"timeout":{"type":"number"},"message":{"type":"string"},"query":{"type":"string"},"max_results":{"type":"integer"},"name":{"type":"string"},"data":{"description":"any JSON value"},"message_id":{"type":"string"}},"required":["operation"]}`,
	}
	require.Len(t, orchestrationDefs, len(want))
	for _, d := range orchestrationDefs {
		require.Equal(t, want[d.Name], string(d.InputSchema), d.Name)
	}
	require.Equal(t, `{"type":"object","properties":{"graph":{"type":"string"},"inputs":{"type":"object"},"async":{"type":"boolean"},"limit_overrides":{"type":"object"},"reserve":{"type":"boolean"}},"required":["graph"]}`,
		string(runGraphDef.InputSchema))

	var sp spawnParams
	require.NoError(t, json.Unmarshal([]byte(`{"directive_id":"a/b","inputs":{"x":1},"async":true,"reserve":true}`), &sp))
	require.Equal(t, "a/b", sp.DirectiveID)
	require.JSONEq(t, `{"x":1}`, string(sp.Inputs))
	require.True(t, sp.Async && sp.Reserve)
	var op orchestratorParams
	require.NoError(t, json.Unmarshal([]byte(`{"operation":"cancel_thread","thread_id":"t","cascade":false}`), &op))
	require.Equal(t, "cancel_thread", op.Operation)
	require.NotNil(t, op.Cascade)
	require.False(t, *op.Cascade)
}
