package deploy

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// `task build` builds spool as the image does: without the build's paths
// and without the symbol table and DWARF (-trimpath -ldflags "-s -w"), a
// third smaller than a plain go build.
func TestTaskBuildStripsAsTheImageDoes(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../Taskfile.yml")
	require.NoError(t, err)
	var tf struct {
		Tasks map[string]struct {
			Cmds []string `yaml:"cmds"`
		} `yaml:"tasks"`
	}
	require.NoError(t, yaml.Unmarshal(data, &tf))
	var build string
	for _, c := range tf.Tasks["build"].Cmds {
		if strings.Contains(c, "./cmd/spool") {
			build = c
		}
	}
	require.NotEmpty(t, build, "task build builds ./cmd/spool")
	docker, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	require.Contains(t, string(docker), `go build -trimpath -ldflags "-s -w`, "the image's build")
	require.True(t, strings.HasPrefix(build, `go build -trimpath -ldflags "-s -w" `), "task build: %s", build)
}
