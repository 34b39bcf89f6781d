package deploy

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDockerfile(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	requireNoProblems(t, checkDockerfile(string(src), ".."))
}

func TestDockerfileChecksCatchBreakage(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	orig := string(data)
	tests := []struct {
		name, old, new, want string
	}{
		{"root user", "USER 65532:65532", "USER root", "runs as USER root"},
		{"uid 0", "USER 65532:65532", "USER 0", "runs as USER 0"},
		{"scratch without user", "FROM gcr.io/distroless/static-debian12:nonroot\n", "FROM scratch\n", ""},
		{"full base image", "FROM gcr.io/distroless/static-debian12:nonroot", "FROM debian:12", "want gcr.io/distroless/static-debian12:nonroot or scratch"},
		{"wrong package", "-o /out/spool ./cmd/spool", "-o /out/spool ./cmd/spoold", "no stage runs go build ./cmd/spool"},
		{"no trimpath", `go build -trimpath -ldflags "-s -w -X`, `go build -ldflags "-s -w -X`, "lacks -trimpath"},
		{"cgo on", "ENV CGO_ENABLED=0 GOFLAGS=-mod=readonly", "ENV GOFLAGS=-mod=readonly", "without CGO_ENABLED=0"},
		{"shell entrypoint", `ENTRYPOINT ["/usr/local/bin/spool"]`, `ENTRYPOINT /usr/local/bin/spool`, `want ["/usr/local/bin/spool"]`},
		{"binary off PATH", "COPY --from=build /out/spool /usr/local/bin/spool", "COPY --from=build /out/spool /spool", "a spool file in a PATH directory"},
		{"PATH without the binary", "ENV SPOOL_DATA_DIR=/var/lib/spool", "ENV SPOOL_DATA_DIR=/var/lib/spool PATH=/usr/bin:/bin", "a spool file in a PATH directory (/usr/bin:/bin)"},
		{"entrypoint elsewhere", `ENTRYPOINT ["/usr/local/bin/spool"]`, `ENTRYPOINT ["/spool"]`, `want ["/usr/local/bin/spool"]`},
		{"single stage", "FROM gcr.io/distroless/static-debian12:nonroot", "# gone", "final stage FROM golang:1.26"},
		{"unknown instruction", "FROM golang:${GO_VERSION} AS build", "FORM golang:${GO_VERSION} AS build", "unknown instruction: FORM"},
		{"broken exec form", `ENTRYPOINT ["/usr/local/bin/spool"]`, `ENTRYPOINT ["/usr/local/bin/spool"`, `want ["/usr/local/bin/spool"] (exec form)`},
		{"copy from unknown stage", "COPY --from=build /out/spool /usr/local/bin/spool", "COPY --from=builder /out/spool /usr/local/bin/spool", "COPY --from=builder names no earlier stage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			broken := mustReplace(t, "Dockerfile", orig, tt.old, tt.new)
			if tt.name == "scratch without user" {
				broken = strings.Replace(broken, "USER 65532:65532\n", "", 1)
				tt.want = "final stage has no USER"
			}
			requireProblem(t, checkDockerfile(broken, ".."), tt.want)
		})
	}
}
