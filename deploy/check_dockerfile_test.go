package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	Cmd  string // upper case: FROM, RUN, ...
	Args string
}

// stage is one FROM ... section.
type stage struct {
	Image, Name string
	Ins         []instruction
}

// parseDockerfile splits a Dockerfile into stages, substituting global ARG
// defaults into FROM lines.
func parseDockerfile(src string) ([]stage, error) {
	var ins []instruction
	var cur strings.Builder
	for _, line := range strings.Split(src, "\n") {
		t := strings.TrimSpace(line)
		if cur.Len() == 0 && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if strings.HasSuffix(t, "\\") {
			cur.WriteString(strings.TrimSuffix(t, "\\") + " ")
			continue
		}
		cur.WriteString(t)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		ins = append(ins, instruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args)})
		cur.Reset()
	}
	globals := map[string]string{}
	var stages []stage
	for _, in := range ins {
		switch {
		case in.Cmd == "FROM":
			f := strings.Fields(in.Args)
			var st stage
			for _, w := range f {
				if !strings.HasPrefix(w, "--") {
					st.Image = w
					break
				}
			}
			if n := len(f); n >= 3 && strings.EqualFold(f[n-2], "AS") {
				st.Name = f[n-1]
			}
			st.Image = os.Expand(st.Image, func(k string) string { return globals[k] })
			stages = append(stages, st)
		case len(stages) == 0 && in.Cmd == "ARG":
			k, v, _ := strings.Cut(in.Args, "=")
			globals[k] = v
		case len(stages) == 0:
			return nil, fmt.Errorf("%s before the first FROM", in.Cmd)
		default:
			stages[len(stages)-1].Ins = append(stages[len(stages)-1].Ins, in)
		}
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("no FROM")
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
		if err := checkImage(st.Image); err != nil {
			p("stage %d: %v", i, err)
		}
		builders[st.Name] = true
		builders[fmt.Sprint(i)] = true
		cgoOff := false
		for _, in := range st.Ins {
			if in.Cmd == "ENV" && regexp.MustCompile(`\bCGO_ENABLED=0\b`).MatchString(in.Args) {
				cgoOff = true
			}
			if in.Cmd != "RUN" {
				continue
			}
			for _, m := range goBuildPkg.FindAllStringSubmatch(in.Args, -1) {
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
				if !cgoOff && !strings.Contains(in.Args, "CGO_ENABLED=0") {
					p("go build of ./cmd/spool without CGO_ENABLED=0 (the final image has no libc)")
				}
			}
		}
	}
	if !builtSpool {
		p("no stage runs go build ./cmd/spool")
	}
	final := stages[len(stages)-1]
	nonrootBase := final.Image == "gcr.io/distroless/static-debian12:nonroot"
	if !nonrootBase && final.Image != "scratch" {
		p("final stage FROM %s, want gcr.io/distroless/static-debian12:nonroot or scratch", final.Image)
	}
	user, entrypoint, pathEnv := "", "", defaultPath
	var spoolDests []string
	for _, in := range final.Ins {
		switch in.Cmd {
		case "USER":
			user = in.Args
		case "ENTRYPOINT":
			entrypoint = in.Args
		case "ENV":
			for _, kv := range strings.Fields(in.Args) {
				if v, ok := strings.CutPrefix(kv, "PATH="); ok {
					pathEnv = strings.Trim(v, `"`)
				}
			}
		case "COPY":
			f := strings.Fields(in.Args)
			from := ""
			for _, w := range f {
				if v, ok := strings.CutPrefix(w, "--from="); ok {
					from = v
				}
			}
			if from != "" && !builders[from] {
				p("COPY --from=%s names no earlier stage", from)
			}
			if dest := f[len(f)-1]; from != "" && path.Base(dest) == "spool" && path.IsAbs(dest) {
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
	var ep []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil || len(ep) != 1 || ep[0] != bin {
		p(`final ENTRYPOINT is %q, want ["%s"]`, entrypoint, bin)
	}
	return probs
}
