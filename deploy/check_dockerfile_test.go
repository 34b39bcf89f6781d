package deploy

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// parseDockerfile parses a Dockerfile as BuildKit does into its stages,
// the global ARG defaults substituted into each stage's FROM.
func parseDockerfile(src string) ([]instructions.Stage, error) {
	ast, err := parser.Parse(strings.NewReader(src))
	if err != nil {
		return nil, err
	}
	stages, metaArgs, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		return nil, err
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("no FROM")
	}
	var globals []string
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			if kv.Value != nil {
				globals = append(globals, kv.Key+"="+*kv.Value)
			}
		}
	}
	lex := shell.NewLex(ast.EscapeToken)
	for i := range stages {
		if stages[i].BaseName, _, err = lex.ProcessWord(stages[i].BaseName, shell.EnvsFromSlice(globals)); err != nil {
			return nil, fmt.Errorf("FROM %s: %w", stages[i].BaseName, err)
		}
	}
	return stages, nil
}

var goBuildPkg = regexp.MustCompile(`go build [^&;]*?(\./[A-Za-z0-9_./-]+)`)

// defaultPath is the PATH a container gets when its image sets none (Docker
// and containerd), which is also what the distroless base images set.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// checkDockerfile: multi-stage, the builder makes a static, trimmed
// ./cmd/spool, and the final stage is a non-root distroless or scratch
// image that installs it as "spool" in a directory on PATH (an external tool
// the worker runs calls `spool thread run` to start a child) and uses that
// path as the entrypoint. repo is the repository root, to check that the
// built packages exist.
func checkDockerfile(src, repo string) []string {
	stages, err := parseDockerfile(src)
	if err != nil {
		return []string{"Dockerfile: " + err.Error()}
	}
	var probs []string
	p := func(format string, args ...any) { probs = append(probs, "Dockerfile: "+fmt.Sprintf(format, args...)) }
	if len(stages) < 2 {
		p("want a multi-stage build, got %d stage(s)", len(stages))
	}
	builders := map[string]bool{}
	builtSpool := false
	for i, st := range stages[:len(stages)-1] {
		if err := checkImage(st.BaseName); err != nil {
			p("stage %d: %v", i, err)
		}
		builders[st.Name] = true
		builders[strconv.Itoa(i)] = true
		cgoOff := false
		for _, c := range st.Commands {
			if env, ok := c.(*instructions.EnvCommand); ok {
				for _, kv := range env.Env {
					cgoOff = cgoOff || kv.Key == "CGO_ENABLED" && kv.Value == "0"
				}
			}
			run, ok := c.(*instructions.RunCommand)
			if !ok {
				continue
			}
			script := strings.Join(run.CmdLine, " ")
			for _, m := range goBuildPkg.FindAllStringSubmatch(script, -1) {
				cmd := m[0]
				if fi, err := os.Stat(filepath.Join(repo, m[1])); err != nil || !fi.IsDir() {
					p("builds %s, which is not a directory of the repository", m[1])
				}
				if m[1] != "./cmd/spool" {
					continue
				}
				builtSpool = true
				if !strings.Contains(cmd, "-trimpath") {
					p("go build of ./cmd/spool lacks -trimpath")
				}
				if !regexp.MustCompile(`-ldflags "[^"]*-s -w`).MatchString(cmd) {
					p(`go build of ./cmd/spool lacks -ldflags "-s -w"`)
				}
				if !cgoOff && !strings.Contains(script, "CGO_ENABLED=0") {
					p("go build of ./cmd/spool without CGO_ENABLED=0 (the final image has no libc)")
				}
			}
		}
	}
	if !builtSpool {
		p("no stage runs go build ./cmd/spool")
	}
	final := stages[len(stages)-1]
	nonrootBase := final.BaseName == "gcr.io/distroless/static-debian12:nonroot"
	if !nonrootBase && final.BaseName != "scratch" {
		p("final stage FROM %s, want gcr.io/distroless/static-debian12:nonroot or scratch", final.BaseName)
	}
	user, pathEnv := "", defaultPath
	var entrypoint *instructions.EntrypointCommand
	var spoolDests []string
	for _, c := range final.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.EntrypointCommand:
			entrypoint = c
		case *instructions.EnvCommand:
			for _, kv := range c.Env {
				if kv.Key == "PATH" {
					pathEnv = kv.Value
				}
			}
		case *instructions.CopyCommand:
			if c.From != "" && !builders[c.From] {
				p("COPY --from=%s names no earlier stage", c.From)
			}
			if dest := c.DestPath; c.From != "" && path.Base(dest) == "spool" && path.IsAbs(dest) {
				spoolDests = append(spoolDests, path.Clean(dest))
			}
		}
	}
	onPath := map[string]bool{}
	for _, d := range filepath.SplitList(pathEnv) {
		onPath[path.Clean(d)] = true
	}
	bin := ""
	for _, d := range spoolDests {
		if onPath[path.Dir(d)] {
			bin = d
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	switch {
	case user == "" && !nonrootBase:
		p("final stage has no USER; it would run as root")
	case user != "" && (uid == "0" || uid == "root"):
		p("final stage runs as USER %s", user)
	}
	if bin == "" {
		p("final stage does not COPY the built binary to a spool file in a PATH directory (%s); got %q", pathEnv, spoolDests)
		return probs
	}
	if entrypoint == nil || entrypoint.PrependShell || len(entrypoint.CmdLine) != 1 || entrypoint.CmdLine[0] != bin {
		got := "none"
		if entrypoint != nil {
			got = entrypoint.String()
		}
		p(`final ENTRYPOINT is %s, want ["%s"] (exec form)`, got, bin)
	}
	return probs
}
