package deploy

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

var composeVar = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}`)

// interpolate applies compose's variable syntax with an empty environment:
// ${VAR:-default} and ${VAR-default} become the default, ${VAR} becomes "",
// and $$ is a literal $.
func interpolate(s string) string {
	return composeVar.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		return composeVar.FindStringSubmatch(m)[2]
	})
}

// loadCompose parses a compose file the way compose sees it with no
// environment set.
func loadCompose(path string) (obj, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c obj
	if err := yaml.Unmarshal([]byte(interpolate(string(raw))), &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// composeArgs returns a service's command as a list.
func composeArgs(svc obj) []string {
	switch c := svc["command"].(type) {
	case []any:
		return stringsOf(c)
	case string:
		return strings.Fields(c)
	}
	return nil
}

// composeEnv returns a service's environment as a map (mapping or list form).
func composeEnv(svc obj) map[string]string {
	out := map[string]string{}
	switch e := svc["environment"].(type) {
	case obj:
		for k, v := range e {
			out[k] = fmt.Sprint(v)
		}
	case []any:
		for _, kv := range stringsOf(e) {
			k, v, _ := strings.Cut(kv, "=")
			out[k] = v
		}
	}
	return out
}

// isSpool reports whether a compose service runs the spool image built from
// deploy/Dockerfile.
func isSpool(svc obj) bool {
	return str(svc, "build", "dockerfile") == "deploy/Dockerfile"
}

// checkCompose: images pinned or built here, volumes and dependencies
// declared, spool services fully configured, health checks and graceful stop.
func checkCompose(c obj) []string {
	var probs []string
	services := mapping(c, "services")
	if len(services) == 0 {
		return []string{"compose: no services"}
	}
	volumes := mapping(c, "volumes")
	var workerQueues []string
	keysInit := map[string]bool{}   // volumes a `keys init` service writes
	publicInit := map[string]bool{} // volumes it writes the public key to (--public-dir)
	keyUsers := map[string]string{} // service -> volume holding its key
	readerVols := map[string][]string{}
	readerTrusted := map[string]string{} // reader -> volume holding SPOOL_TRUSTED_KEYS
	for _, name := range sortedKeys(services) {
		svc := mapping(services, name)
		p := func(format string, args ...any) {
			probs = append(probs, fmt.Sprintf("compose service %s: ", name)+fmt.Sprintf(format, args...))
		}
		image := str(svc, "image")
		oneShot := str(svc, "restart") == "no"
		if isSpool(svc) {
			if image == "" {
				p("builds spool but names no image")
			}
		} else if err := checkImage(image); err != nil {
			p("%v", err)
		}
		for _, v := range list(svc, "volumes") {
			src, _, _ := strings.Cut(fmt.Sprint(v), ":")
			if vm, ok := v.(obj); ok {
				src = str(vm, "source")
			}
			named := src != "" && !strings.ContainsAny(src[:1], "./~")
			if _, ok := volumes[src]; named && !ok {
				p("volume %q is not declared under top-level volumes", src)
			}
		}
		deps := mapping(svc, "depends_on")
		for _, dep := range sortedKeys(deps) {
			target := mapping(services, dep)
			if target == nil {
				p("depends_on %q, which is not a service", dep)
				continue
			}
			cond := str(deps, dep, "condition")
			switch {
			case cond == "service_healthy" && get(target, "healthcheck") == nil:
				p("waits for %s to be healthy, but it has no healthcheck", dep)
			case cond == "service_completed_successfully" && str(target, "restart") != "no":
				p("waits for %s to complete, but it is not a one-shot (restart: \"no\")", dep)
			}
		}
		if !oneShot {
			if get(svc, "healthcheck", "test") == nil {
				p("long-running service has no healthcheck")
			}
			if str(svc, "restart") == "" {
				p("long-running service has no restart policy")
			}
		}
		for _, port := range list(svc, "ports") {
			if s := fmt.Sprint(port); !strings.HasPrefix(s, "127.0.0.1:") {
				p("port %q is published on every interface; bind it to 127.0.0.1", s)
			}
		}
		if !isSpool(svc) {
			continue
		}
		env := composeEnv(svc)
		for _, want := range composeRequiredEnv {
			if env[want] == "" {
				p("setting %s is not provided", want)
			}
		}
		args := composeArgs(svc)
		vol := volumeHolding(svc, volumes, keyPath(env))
		switch {
		case len(args) > 0 && readers[args[0]]:
			readerVols[name], readerTrusted[name] = namedVolumes(svc, volumes), ""
			if tk := env["SPOOL_TRUSTED_KEYS"]; tk != "" {
				readerTrusted[name] = volumeHolding(svc, volumes, strings.TrimSuffix(tk, "/")+"/")
			}
		case vol == "":
			p("the signing key (%s) is not on a named volume", keyPath(env))
		case len(args) >= 2 && args[0] == "keys" && args[1] == "init":
			keysInit[vol] = true
			if i := slices.Index(args, "--public-dir"); i >= 0 && i+1 < len(args) {
				if pv := volumeHolding(svc, volumes, strings.TrimSuffix(args[i+1], "/")+"/"); pv != "" {
					publicInit[pv] = true
				}
			}
		default:
			keyUsers[name] = vol
		}
		if len(args) > 0 && args[0] == "worker" {
			timeout, err := shutdownTimeout(args)
			if err != nil {
				p("%v", err)
			}
			grace, err := time.ParseDuration(str(svc, "stop_grace_period"))
			if err != nil {
				grace = 10 * time.Second // compose's default
			}
			if grace <= timeout {
				p("stop_grace_period %s is not longer than --shutdown-timeout %s", grace, timeout)
			}
			if _, ok := get(svc, "deploy", "replicas").(int); !ok {
				p("deploy.replicas is not set (want the N workers, e.g. ${SPOOL_WORKERS:-3})")
			}
			if !strings.Contains(strings.Join(stringsOf(list(svc, "healthcheck", "test")), " "), "/healthz") {
				p("healthcheck does not probe /healthz")
			}
			if workerQueues, err = queuesOf(args); err != nil {
				p("--queues: %v", err)
			}
		}
	}
	for _, name := range sortedKeys(keyUsers) {
		if !keysInit[keyUsers[name]] {
			probs = append(probs, fmt.Sprintf("compose service %s: no one-shot `keys init` service writes the signing key to volume %s", name, keyUsers[name]))
		}
	}
	// Least privilege: a reader mounts the public key, not the private one.
	for _, name := range sortedKeys(readerVols) {
		p := func(format string, args ...any) {
			probs = append(probs, fmt.Sprintf("compose service %s: ", name)+fmt.Sprintf(format, args...))
		}
		for _, v := range readerVols[name] {
			if keysInit[v] {
				p("a reader mounts volume %s, which holds the private signing key; mount the public key only", v)
			}
		}
		switch tv := readerTrusted[name]; {
		case tv == "":
			p("a reader has no SPOOL_TRUSTED_KEYS on a named volume: it could not verify transcripts")
		case !publicInit[tv]:
			p("no one-shot `keys init --public-dir` service writes the public key to volume %s", tv)
		}
	}
	if workerQueues == nil {
		probs = append(probs, "compose: no worker service")
	}
	redis := mapping(services, "redis")
	if !strings.Contains(strings.Join(composeArgs(redis), " "), "--appendonly yes") {
		probs = append(probs, "compose service redis: AOF persistence (--appendonly yes) is off")
	}
	return probs
}

// composeRequiredEnv are the settings every spool service needs in compose;
// the signing key is found through SPOOL_DATA_DIR (see keyPath).
var composeRequiredEnv = append(slices.DeleteFunc(slices.Clone(requiredEnv),
	func(s string) bool { return s == "SPOOL_SIGNING_KEY" }), "SPOOL_DATA_DIR")

// keyPath is where a spool process looks for its signing key:
// SPOOL_SIGNING_KEY, else <SPOOL_DATA_DIR>/keys/.
func keyPath(env map[string]string) string {
	if k := env["SPOOL_SIGNING_KEY"]; k != "" {
		return k
	}
	if d := env["SPOOL_DATA_DIR"]; d != "" {
		return strings.TrimSuffix(d, "/") + "/keys/"
	}
	return ""
}

// volumeHolding names the named volume of svc mounted over path (a file,
// or a directory ending in "/"), or "".
func volumeHolding(svc, volumes obj, path string) string {
	if path == "" || path == "/" {
		return ""
	}
	for _, v := range stringsOf(list(svc, "volumes")) {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			continue
		}
		if _, named := volumes[parts[0]]; named && strings.HasPrefix(path, strings.TrimSuffix(parts[1], "/")+"/") {
			return parts[0]
		}
	}
	return ""
}

// namedVolumes lists the named volumes svc mounts.
func namedVolumes(svc, volumes obj) []string {
	var out []string
	for _, v := range stringsOf(list(svc, "volumes")) {
		if src, _, _ := strings.Cut(v, ":"); src != "" {
			if _, named := volumes[src]; named {
				out = append(out, src)
			}
		}
	}
	return out
}
