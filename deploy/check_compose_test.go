package deploy

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// loadCompose loads a compose file as `docker compose` does with no
// environment set (compose-go: the specification's schema, anchors and
// merges, ${VAR:-default} interpolation, references between services and
// volumes).
func loadCompose(path string) (*types.Project, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []types.ConfigFile{{Filename: abs}},
		Environment: types.Mapping{},
	})
}

// composeEnv is a service's environment, unset variables empty.
func composeEnv(svc types.ServiceConfig) map[string]string {
	out := map[string]string{}
	for k, v := range svc.Environment {
		if v != nil {
			out[k] = *v
		}
	}
	return out
}

// isSpool reports whether a compose service runs the spool image built from
// deploy/Dockerfile.
func isSpool(svc types.ServiceConfig) bool {
	return svc.Build != nil && svc.Build.Dockerfile == "deploy/Dockerfile"
}

// checkCompose: images pinned or built here, volumes and dependencies
// declared, spool services fully configured, health checks and graceful
// stop, and least privilege for the signing key.
func checkCompose(p *types.Project) []string {
	var probs []string
	if len(p.Services) == 0 {
		return []string{"compose: no services"}
	}
	var workerQueues []string
	keysInit := map[string]bool{}   // volumes a `keys init` service writes
	publicInit := map[string]bool{} // volumes it writes the public key to (--public-dir)
	keyUsers := map[string]string{} // service -> volume holding its key
	readerVols := map[string][]string{}
	readerTrusted := map[string]string{} // reader -> volume holding SPOOL_TRUSTED_KEYS
	for _, name := range sortedKeys(p.Services) {
		svc := p.Services[name]
		pf := func(format string, args ...any) {
			probs = append(probs, fmt.Sprintf("compose service %s: ", name)+fmt.Sprintf(format, args...))
		}
		oneShot := svc.Restart == "no"
		if isSpool(svc) {
			if svc.Image == "" {
				pf("builds spool but names no image")
			}
		} else if err := checkImage(svc.Image); err != nil {
			pf("%v", err)
		}
		for _, v := range svc.Volumes {
			if _, ok := p.Volumes[v.Source]; v.Type == types.VolumeTypeVolume && v.Source != "" && !ok {
				pf("volume %q is not declared under top-level volumes", v.Source)
			}
		}
		for _, dep := range sortedKeys(svc.DependsOn) {
			target, ok := p.Services[dep]
			if !ok {
				pf("depends_on %q, which is not a service", dep)
				continue
			}
			switch cond := svc.DependsOn[dep].Condition; {
			case cond == types.ServiceConditionHealthy && target.HealthCheck == nil:
				pf("waits for %s to be healthy, but it has no healthcheck", dep)
			case cond == types.ServiceConditionCompletedSuccessfully && target.Restart != "no":
				pf("waits for %s to complete, but it is not a one-shot (restart: \"no\")", dep)
			}
		}
		if !oneShot {
			if svc.HealthCheck == nil || len(svc.HealthCheck.Test) == 0 {
				pf("long-running service has no healthcheck")
			}
			if svc.Restart == "" {
				pf("long-running service has no restart policy")
			}
		}
		for _, port := range svc.Ports {
			if port.HostIP != "127.0.0.1" {
				pf("port %s:%d is published on every interface; bind it to 127.0.0.1", port.Published, port.Target)
			}
		}
		if !isSpool(svc) {
			continue
		}
		env := composeEnv(svc)
		for _, want := range composeRequiredEnv {
			if env[want] == "" {
				pf("setting %s is not provided", want)
			}
		}
		args := []string(svc.Command)
		vol := volumeHolding(svc, keyPath(env))
		switch {
		case len(args) > 0 && readers[args[0]]:
			readerVols[name], readerTrusted[name] = namedVolumes(svc), ""
			if tk := env["SPOOL_TRUSTED_KEYS"]; tk != "" {
				readerTrusted[name] = volumeHolding(svc, strings.TrimSuffix(tk, "/")+"/")
			}
		case vol == "":
			pf("the signing key (%s) is not on a named volume", keyPath(env))
		case len(args) >= 2 && args[0] == "keys" && args[1] == "init":
			keysInit[vol] = true
			if i := slices.Index(args, "--public-dir"); i >= 0 && i+1 < len(args) {
				if pv := volumeHolding(svc, strings.TrimSuffix(args[i+1], "/")+"/"); pv != "" {
					publicInit[pv] = true
				}
			}
		default:
			keyUsers[name] = vol
		}
		if len(args) > 0 && args[0] == "worker" {
			timeout, err := shutdownTimeout(args)
			if err != nil {
				pf("%v", err)
			}
			grace := 10 * time.Second // compose's default
			if svc.StopGracePeriod != nil {
				grace = time.Duration(*svc.StopGracePeriod)
			}
			if grace <= timeout {
				pf("stop_grace_period %s is not longer than --shutdown-timeout %s", grace, timeout)
			}
			if svc.Deploy == nil || svc.Deploy.Replicas == nil {
				pf("deploy.replicas is not set (want the N workers, e.g. ${SPOOL_WORKERS:-3})")
			}
			if svc.HealthCheck == nil || !strings.Contains(strings.Join(svc.HealthCheck.Test, " "), "/healthz") {
				pf("healthcheck does not probe /healthz")
			}
			if workerQueues, err = queuesOf(args); err != nil {
				pf("--queues: %v", err)
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
		pf := func(format string, args ...any) {
			probs = append(probs, fmt.Sprintf("compose service %s: ", name)+fmt.Sprintf(format, args...))
		}
		for _, v := range readerVols[name] {
			if keysInit[v] {
				pf("a reader mounts volume %s, which holds the private signing key; mount the public key only", v)
			}
		}
		switch tv := readerTrusted[name]; {
		case tv == "":
			pf("a reader has no SPOOL_TRUSTED_KEYS on a named volume: it could not verify transcripts")
		case !publicInit[tv]:
			pf("no one-shot `keys init --public-dir` service writes the public key to volume %s", tv)
		}
	}
	if workerQueues == nil {
		probs = append(probs, "compose: no worker service")
	}
	if !strings.Contains(strings.Join(p.Services["redis"].Command, " "), "--appendonly yes") {
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
func volumeHolding(svc types.ServiceConfig, path string) string {
	if path == "" || path == "/" {
		return ""
	}
	for _, v := range svc.Volumes {
		if v.Type == types.VolumeTypeVolume && strings.HasPrefix(path, strings.TrimSuffix(v.Target, "/")+"/") {
			return v.Source
		}
	}
	return ""
}

// namedVolumes lists the named volumes svc mounts.
func namedVolumes(svc types.ServiceConfig) []string {
	var out []string
	for _, v := range svc.Volumes {
		if v.Type == types.VolumeTypeVolume {
			out = append(out, v.Source)
		}
	}
	return out
}
