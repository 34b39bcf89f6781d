package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/yannh/kubeconform/pkg/resource"
	"github.com/yannh/kubeconform/pkg/validator"
	"gopkg.in/yaml.v3"

	"github.com/stretchr/testify/require"
)

//go:generate go run ./internal/schemagen -out testdata/k8s-schemas

// schemaDir holds the JSON schemas of the kinds the deploy files use,
// strict and offline: internal/schemagen writes them from the Kubernetes
// and KEDA modules (go generate ./deploy).
const schemaDir = "testdata/k8s-schemas"

// kubeconform validates documents against the schemas in schemaDir; it is
// safe for concurrent use.
var kubeconform = sync.OnceValues(func() (validator.Validator, error) {
	dir, err := filepath.Abs(schemaDir)
	if err != nil {
		return nil, err
	}
	return validator.New([]string{filepath.Join(dir, "{{ .ResourceKind }}{{ .KindSuffix }}.json")},
		validator.Opts{Strict: true})
})

// checkSchemas validates each document against the schema of its kind:
// only fields Kubernetes (or KEDA) defines, of the types it expects, the
// required ones present. A kind without a schema is a problem too: add it
// to internal/schemagen.
func checkSchemas(docs []doc) []string {
	v, err := kubeconform()
	if err != nil {
		return []string{err.Error()}
	}
	var probs []string
	for _, d := range docs {
		raw, err := yaml.Marshal(d.Obj)
		if err != nil {
			probs = append(probs, fmt.Sprintf("%s: %v", d, err))
			continue
		}
		res := v.ValidateResource(resource.Resource{Path: d.File, Bytes: raw})
		switch res.Status {
		case validator.Valid:
		case validator.Invalid:
			// One problem per failed check: the error text lists them as
			// "- at '<path>': <what>" after the schema's name.
			for _, at := range strings.Split(res.Err.Error(), "- at '")[1:] {
				if path, what, _ := strings.Cut(strings.TrimSpace(at), "': "); what != "validation failed" {
					probs = append(probs, fmt.Sprintf("%s: %s: %s", d, path, what))
				}
			}
		default:
			probs = append(probs, fmt.Sprintf("%s: %v", d, res.Err))
		}
	}
	return probs
}

func TestManifestsMatchTheirSchemas(t *testing.T) {
	t.Parallel()
	requireNoProblems(t, checkSchemas(loadTestBase(t).Docs))
}

// TestSchemasAreOffline: every schema is a local file and refers to none
// on the network.
func TestSchemasAreOffline(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(schemaDir, "*.json"))
	require.NoError(t, err, "schemas in %s: %v", schemaDir, files)
	require.GreaterOrEqual(t, len(files), 2, "schemas in %s: %v, %v; run go generate ./deploy", schemaDir, files, err)
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		if strings.Contains(string(data), `"$ref": "http`) || strings.Contains(string(data), `"$schema"`) {
			t.Errorf("%s refers to a schema on the network", f)
		}
	}
}

func TestSchemaChecksCatchBreakage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, kind, obj string
		path            []any
		value           any
		want            string
	}{
		{"misspelt field", "Deployment", "spool-worker", containerPath("readinessprobe"), obj{"periodSeconds": 10}, "additional properties 'readinessprobe' not allowed"},
		{"number as text", "Deployment", "spool-worker", []any{"spec", "template", "spec", "terminationGracePeriodSeconds"}, "45", "want integer"},
		{"no containers", "Deployment", "spool-monitor", []any{"spec", "template", "spec", "containers"}, nil, "missing property 'containers'"},
		{"port out of type", "Service", "spool-monitor", []any{"spec", "ports", 0, "port"}, "http", "want integer"},
		{"unknown KEDA field", "ScaledObject", "spool-worker", []any{"spec", "minReplicas"}, 1, "additional properties 'minReplicas' not allowed"},
		{"trigger without type", "ScaledObject", "spool-worker", []any{"spec", "triggers", 0, "type"}, nil, "missing property 'type'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := loadTestBase(t)
			d := mustFind(t, b.Docs, tt.kind, tt.obj)
			set(t, d.Obj, tt.value, tt.path...)
			requireProblem(t, checkSchemas(b.Docs), tt.want)
		})
	}
}
