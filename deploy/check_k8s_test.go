package deploy

import (
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/worker"
)

// requiredEnv are the settings every spool process in a cluster needs
// (CLI.md "Settings"); without them spool falls back to embedded Redis and
// a local directory, which is wrong for a fleet.
var requiredEnv = []string{
	"SPOOL_REDIS_URL",
	"SPOOL_S3_ENDPOINT",
	"SPOOL_S3_BUCKET",
	"SPOOL_S3_REGION",
	"SPOOL_S3_PATH_STYLE",
	"AWS_ACCESS_KEY_ID",
	"AWS_SECRET_ACCESS_KEY",
}

// readers are the spool commands that sign nothing. Least privilege: they
// get the public key (SPOOL_TRUSTED_KEYS), never the private one; every
// other spool process signs and needs SPOOL_SIGNING_KEY.
var readers = map[string]bool{"monitor": true}

// privateKeyItem is the Secret key holding the Ed25519 private key.
const privateKeyItem = "signing.key"

// defaultShutdownTimeout is the worker's --shutdown-timeout default.
const defaultShutdownTimeout = 30 * time.Second

// checkKustomizationFiles: the base is namespace-agnostic, lists only files
// that exist, lists every manifest beside it, and its generator sources exist
// (or their committed .example templates do) and are git-ignored.
func checkKustomizationFiles(dir string, k obj) []string {
	var probs []string
	if _, ok := k["namespace"]; ok {
		probs = append(probs, "kustomization sets a namespace; the base must be namespace-agnostic")
	}
	listed := map[string]bool{}
	for _, r := range list(k, "resources") {
		rel, _ := r.(string)
		listed[filepath.Clean(rel)] = true
		fi, err := os.Stat(filepath.Join(dir, rel))
		switch {
		case err != nil:
			probs = append(probs, fmt.Sprintf("resource %q does not exist", rel))
		case fi.IsDir():
			probs = append(probs, fmt.Sprintf("resource %q is a directory, want a file", rel))
		}
	}
	manifests, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, m := range manifests {
		if base := filepath.Base(m); base != "kustomization.yaml" && !listed[base] {
			probs = append(probs, fmt.Sprintf("%s is not listed in resources", base))
		}
	}
	ignored := gitignored(dir)
	for _, g := range list(k, "secretGenerator") {
		var sources []string
		for _, f := range list(g, "files") {
			sources = append(sources, generatorFilePath(f.(string)))
		}
		for _, e := range list(g, "envs") {
			sources = append(sources, e.(string))
		}
		for _, src := range sources {
			if _, err := secretSource(dir, src); err != nil {
				probs = append(probs, err.Error())
			}
			if !ignored[filepath.Clean(src)] {
				probs = append(probs, fmt.Sprintf("secret source %s is not git-ignored", src))
			}
		}
	}
	return probs
}

// gitignored returns the paths (relative to dir) named literally in
// .gitignore files of dir's subdirectories.
func gitignored(dir string) map[string]bool {
	out := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(dir, "*", ".gitignore"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sub, _ := filepath.Rel(dir, filepath.Dir(f))
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if line != "" && !strings.HasPrefix(line, "#") {
				out[filepath.Join(sub, line)] = true
			}
		}
	}
	return out
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkWorkloads checks spool's rules for every Deployment of the base,
// beyond what its schema says (checkSchemas): security context, resources,
// probes, images, the settings and keys each process needs and no more,
// and that every ConfigMap/Secret name and key it references exists.
func checkWorkloads(b *kbase) []string {
	var probs []string
	configMaps := map[string]obj{}
	for _, d := range byKind(b.Docs, "ConfigMap") {
		configMaps[d.name()] = mapping(d.Obj, "data")
	}
	for _, d := range b.Docs {
		if ns := str(d.Obj, "metadata", "namespace"); ns != "" {
			probs = append(probs, fmt.Sprintf("%s: sets namespace %q; the base must be namespace-agnostic", d, ns))
		}
	}
	deps := byKind(b.Docs, "Deployment")
	if len(deps) == 0 {
		probs = append(probs, "no Deployment in the base")
	}
	for _, d := range deps {
		p := func(format string, args ...any) {
			probs = append(probs, fmt.Sprintf("%s: ", d)+fmt.Sprintf(format, args...))
		}
		pod := mapping(d.Obj, "spec", "template", "spec")
		labels := mapping(d.Obj, "spec", "template", "metadata", "labels")
		sel := mapping(d.Obj, "spec", "selector", "matchLabels")
		if len(sel) == 0 {
			p("no spec.selector.matchLabels")
		}
		for k, v := range sel {
			if labels[k] != v {
				p("selector %s=%v does not match the pod template labels", k, v)
			}
		}
		if get(pod, "securityContext", "runAsNonRoot") != true {
			p("pod securityContext.runAsNonRoot is not true")
		}
		if uid, ok := intOf(pod, "securityContext", "runAsUser"); !ok || uid == 0 {
			p("pod securityContext.runAsUser must be a non-zero uid")
		}
		volumes := map[string]obj{}
		for _, v := range list(pod, "volumes") {
			volumes[str(v, "name")] = v.(obj)
		}
		for name, v := range volumes {
			if sec := mapping(v, "secret"); sec != nil {
				sn := str(sec, "secretName")
				keys, ok := b.Secrets[sn]
				if !ok {
					p("volume %s: Secret %q does not exist", name, sn)
				}
				for _, it := range list(sec, "items") {
					if k := str(it, "key"); !keys[k] {
						p("volume %s: Secret %q has no key %q", name, sn, k)
					}
				}
			}
			if cm := mapping(v, "configMap"); cm != nil {
				if _, ok := configMaps[str(cm, "name")]; !ok {
					p("volume %s: ConfigMap %q does not exist", name, str(cm, "name"))
				}
			}
		}
		for _, c := range list(pod, "containers") { // at least one: checkSchemas
			cname := str(c, "name")
			cp := func(format string, args ...any) { p("container %s: "+format, append([]any{cname}, args...)...) }
			if err := checkImage(str(c, "image")); err != nil {
				cp("%v", err)
			}
			if get(c, "securityContext", "allowPrivilegeEscalation") != false {
				cp("securityContext.allowPrivilegeEscalation is not false")
			}
			if get(c, "securityContext", "readOnlyRootFilesystem") != true {
				cp("securityContext.readOnlyRootFilesystem is not true")
			}
			for _, r := range []string{"requests.cpu", "requests.memory", "limits.memory"} {
				a, b, _ := strings.Cut(r, ".")
				if str(c, "resources", a, b) == "" {
					cp("resources.%s is not set", r)
				}
			}
			ports := map[string]bool{}
			for _, port := range list(c, "ports") {
				ports[str(port, "name")] = true
				ports[str(port, "containerPort")] = true
			}
			for _, probe := range []string{"readinessProbe", "livenessProbe"} {
				if path := str(c, probe, "httpGet", "path"); path != "/healthz" {
					cp("%s.httpGet.path is %q, want /healthz", probe, path)
				}
				if port := str(c, probe, "httpGet", "port"); !ports[port] {
					cp("%s port %q is not a declared container port", probe, port)
				}
			}
			// Environment: every name and key referenced must exist.
			env := map[string]string{} // name -> literal value ("" if from a ref)
			for _, ef := range list(c, "envFrom") {
				if n := str(ef, "configMapRef", "name"); n != "" {
					data, ok := configMaps[n]
					if !ok {
						cp("envFrom ConfigMap %q does not exist", n)
					}
					for k, v := range data {
						env[k] = fmt.Sprint(v)
					}
				}
				if n := str(ef, "secretRef", "name"); n != "" {
					keys, ok := b.Secrets[n]
					if !ok {
						cp("envFrom Secret %q does not exist", n)
					}
					for k := range keys {
						env[k] = ""
					}
				}
			}
			for _, e := range list(c, "env") {
				name := str(e, "name")
				if ref := mapping(e, "valueFrom", "secretKeyRef"); ref != nil {
					sn, key := str(ref, "name"), str(ref, "key")
					if keys, ok := b.Secrets[sn]; !ok {
						cp("env %s: Secret %q does not exist", name, sn)
					} else if !keys[key] {
						cp("env %s: Secret %q has no key %q", name, sn, key)
					}
				}
				if ref := mapping(e, "valueFrom", "configMapKeyRef"); ref != nil {
					cn, key := str(ref, "name"), str(ref, "key")
					if data, ok := configMaps[cn]; !ok {
						cp("env %s: ConfigMap %q does not exist", name, cn)
					} else if _, ok := data[key]; !ok {
						cp("env %s: ConfigMap %q has no key %q", name, cn, key)
					}
				}
				value := str(e, "value")
				for _, m := range envRef.FindAllStringSubmatch(value, -1) {
					if _, ok := env[m[1]]; !ok {
						cp("env %s refers to $(%s), which is not defined before it", name, m[1])
					}
				}
				env[name] = value
			}
			for _, want := range requiredEnv {
				if _, ok := env[want]; !ok {
					cp("setting %s is not provided", want)
				}
			}
			args := stringsOf(list(c, "args"))
			if len(args) > 0 && readers[args[0]] {
				// A reader: the public key, mounted; no private key.
				if k := env["SPOOL_SIGNING_KEY"]; k != "" {
					cp("a reader (%s) is given SPOOL_SIGNING_KEY %s; it signs nothing and gets the public key only (SPOOL_TRUSTED_KEYS)", args[0], k)
				}
				if mountsSecretKey(c.(obj), volumes, b.Secrets, privateKeyItem) {
					cp("a reader (%s) mounts the private signing key (%s); mount the public key only", args[0], privateKeyItem)
				}
				if dir := env["SPOOL_TRUSTED_KEYS"]; dir == "" {
					cp("a reader (%s) has no SPOOL_TRUSTED_KEYS: it could not verify transcripts", args[0])
				} else if !mountedAt(c.(obj), volumes, dir) {
					cp("SPOOL_TRUSTED_KEYS %s is not a mounted Secret or ConfigMap volume", dir)
				}
			} else if keyPath := env["SPOOL_SIGNING_KEY"]; keyPath == "" {
				cp("setting SPOOL_SIGNING_KEY is not provided (%v signs transcripts)", args)
			} else if !signingKeyMounted(c.(obj), volumes, b.Secrets, keyPath) {
				// The signing key path must be a key file of a mounted Secret.
				cp("SPOOL_SIGNING_KEY %s is not a file of a mounted Secret volume", keyPath)
			}
			for _, vm := range list(c, "volumeMounts") {
				if _, ok := volumes[str(vm, "name")]; !ok {
					cp("volumeMount %q has no volume", str(vm, "name"))
				}
			}
		}
	}
	return probs
}

// mountsSecretKey reports whether container c mounts a Secret volume that
// shows key (as an item, or the whole Secret when it lists none).
func mountsSecretKey(c obj, volumes map[string]obj, secrets map[string]map[string]bool, key string) bool {
	for _, sec := range secretMounts(c, volumes) {
		items := list(sec, "items")
		if len(items) == 0 && secrets[str(sec, "secretName")][key] {
			return true
		}
		for _, it := range items {
			if str(it, "key") == key {
				return true
			}
		}
	}
	return false
}

// secretMounts yields each volume mount of container c whose volume (in
// volumes, by name) is a Secret, with the volume's secret source.
func secretMounts(c obj, volumes map[string]obj) iter.Seq2[any, obj] {
	return func(yield func(any, obj) bool) {
		for _, vm := range list(c, "volumeMounts") {
			if sec := mapping(volumes[str(vm, "name")], "secret"); sec != nil && !yield(vm, sec) {
				return
			}
		}
	}
}

// mountedAt reports whether container c mounts a Secret or ConfigMap
// volume at dir.
func mountedAt(c obj, volumes map[string]obj, dir string) bool {
	for _, vm := range list(c, "volumeMounts") {
		v := volumes[str(vm, "name")]
		if filepath.Clean(str(vm, "mountPath")) == filepath.Clean(dir) && (mapping(v, "secret") != nil || mapping(v, "configMap") != nil) {
			return true
		}
	}
	return false
}

// signingKeyMounted reports whether path is the file an item of a Secret
// volume mounted in container c appears as, and the Secret has that key.
func signingKeyMounted(c obj, volumes map[string]obj, secrets map[string]map[string]bool, path string) bool {
	for vm, sec := range secretMounts(c, volumes) {
		keys := secrets[str(sec, "secretName")]
		for _, it := range list(sec, "items") {
			if filepath.Join(str(vm, "mountPath"), str(it, "path")) == path && keys[str(it, "key")] {
				return true
			}
		}
	}
	return false
}

// workerContainer finds the worker Deployment: the one whose container runs
// `spool worker`.
func workerContainer(docs []doc) (doc, obj, error) {
	var found []doc
	var container obj
	for _, d := range byKind(docs, "Deployment") {
		for _, c := range list(d.Obj, "spec", "template", "spec", "containers") {
			if args := stringsOf(list(c, "args")); len(args) > 0 && args[0] == "worker" {
				found = append(found, d)
				container = c.(obj)
			}
		}
	}
	if len(found) != 1 {
		return doc{}, nil, fmt.Errorf("want exactly one worker Deployment (args[0] == worker), found %d", len(found))
	}
	return found[0], container, nil
}

// shutdownTimeout reads --shutdown-timeout from the worker's args.
func shutdownTimeout(args []string) (time.Duration, error) {
	v, ok := flagValue(args, "shutdown-timeout")
	if !ok {
		return defaultShutdownTimeout, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("--shutdown-timeout %q: %w", v, err)
	}
	return d, nil
}

// checkGracePeriod: the kubelet must not SIGKILL a worker before its
// --shutdown-timeout has passed.
func checkGracePeriod(docs []doc) []string {
	d, c, err := workerContainer(docs)
	if err != nil {
		return []string{err.Error()}
	}
	timeout, err := shutdownTimeout(stringsOf(list(c, "args")))
	if err != nil {
		return []string{err.Error()}
	}
	grace, ok := intOf(d.Obj, "spec", "template", "spec", "terminationGracePeriodSeconds")
	if !ok {
		grace = 30 // the Kubernetes default
	}
	if time.Duration(grace)*time.Second <= timeout {
		return []string{fmt.Sprintf("%s: terminationGracePeriodSeconds %d is not longer than --shutdown-timeout %s", d, grace, timeout)}
	}
	return nil
}

// demandQuery is the query the KEDA trigger must run for spool namespace
// ns: admission's ready and running activations (14.1), each series
// counted once however many monitor replicas export it.
func demandQuery(ns string) string {
	return fmt.Sprintf(`(sum(max by (tenant, queue) (spool_admission_ready{spool_namespace=%q})) or vector(0))`+
		` + (sum(max by (tenant, queue) (spool_admission_running{spool_namespace=%q})) or vector(0))`, ns, ns)
}

// sameQuery compares two PromQL queries by their words: a folded YAML
// scalar joins lines with one space, a literal one keeps them.
func sameQuery(a, b string) bool {
	return strings.Join(strings.Fields(a), " ") == strings.Join(strings.Fields(b), " ")
}

// envSetting is one variable of a container's environment as the kubelet
// sets it; fromSecret means its value is not in the base.
type envSetting struct {
	value      string
	fromSecret bool
}

// containerEnv resolves container c's environment from the base: envFrom
// sources in order, then env entries, later ones winning, as the kubelet
// does. Values from Secrets are marked, not read; $(VAR) references are
// left as written.
func containerEnv(c any, configMaps map[string]obj, secrets map[string]map[string]bool) map[string]envSetting {
	env := map[string]envSetting{}
	for _, ef := range list(c, "envFrom") {
		for k, v := range configMaps[str(ef, "configMapRef", "name")] {
			env[str(ef, "prefix")+k] = envSetting{value: fmt.Sprint(v)}
		}
		for k := range secrets[str(ef, "secretRef", "name")] {
			env[str(ef, "prefix")+k] = envSetting{fromSecret: true}
		}
	}
	for _, e := range list(c, "env") {
		name := str(e, "name")
		switch {
		case mapping(e, "valueFrom", "configMapKeyRef") != nil:
			ref := mapping(e, "valueFrom", "configMapKeyRef")
			env[name] = envSetting{value: str(configMaps[str(ref, "name")], str(ref, "key"))}
		case mapping(e, "valueFrom") != nil:
			env[name] = envSetting{fromSecret: true}
		default:
			env[name] = envSetting{value: str(e, "value")}
		}
	}
	return env
}

// workerNamespace is the spool namespace (SPOOL_NAMESPACE) the worker
// container runs in, keyspace.DefaultNamespace when unset.
func workerNamespace(env map[string]envSetting) (string, error) {
	e, ok := env["SPOOL_NAMESPACE"]
	switch {
	case !ok:
		return keyspace.DefaultNamespace, nil
	case e.fromSecret:
		return "", fmt.Errorf("SPOOL_NAMESPACE comes from a Secret; set it in the ConfigMap so the KEDA list names can be checked")
	case strings.Contains(e.value, "$("):
		return "", fmt.Errorf("SPOOL_NAMESPACE %q refers to other variables; set it literally so the KEDA list names can be checked", e.value)
	}
	return keyspace.New(e.value).Namespace(), nil
}

// checkKEDA: one ScaledObject targets the worker Deployment, with exactly
// one trigger, a Prometheus query of admission's ready and running
// activations in the worker's namespace (demandQuery), whose threshold is
// the worker's --concurrency; no trigger reads asynq's lists (they hold
// only granted work while admission is on); sane bounds (at least one
// worker, always).
func checkKEDA(b *kbase) []string {
	var probs []string
	p := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	wd, wc, err := workerContainer(b.Docs)
	if err != nil {
		return []string{err.Error()}
	}
	if _, ok := get(wd.Obj, "spec", "replicas").(int); ok {
		p("%s sets spec.replicas; KEDA owns the worker replica count", wd)
	}
	configMaps := map[string]obj{}
	for _, d := range byKind(b.Docs, "ConfigMap") {
		configMaps[d.name()] = mapping(d.Obj, "data")
	}
	env := containerEnv(wc, configMaps, b.Secrets)
	ns, err := workerNamespace(env)
	if err != nil {
		return append(probs, fmt.Sprintf("%s: %v", wd, err))
	}
	args := stringsOf(list(wc, "args"))
	concurrency := 0
	if cv, ok := flagValue(args, "concurrency"); ok {
		concurrency, err = strconv.Atoi(cv)
		if err != nil || concurrency <= 0 {
			p("worker --concurrency %q is not a positive integer", cv)
		}
	} else {
		p("worker does not set --concurrency; the KEDA threshold is derived from it")
	}
	var sos []doc
	for _, d := range byKind(b.Docs, "ScaledObject") {
		if str(d.Obj, "spec", "scaleTargetRef", "name") == wd.name() {
			sos = append(sos, d)
		}
	}
	if len(sos) != 1 {
		return append(probs, fmt.Sprintf("want exactly one ScaledObject targeting %s, found %d", wd.name(), len(sos)))
	}
	so := sos[0]
	probs = append(probs, checkScaleBounds(so)...)
	triggers := list(so.Obj, "spec", "triggers")
	if len(triggers) != 1 {
		p("%s: want exactly one trigger (the Prometheus query of admission's demand), found %d", so, len(triggers))
	}
	for i, t := range triggers {
		probs = append(probs, checkDemandTrigger(so, i, t, ns, concurrency)...)
	}
	return probs
}

// checkScaleBounds checks a ScaledObject's kind and bounds.
func checkScaleBounds(so doc) []string {
	var probs []string
	p := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if kind := str(so.Obj, "spec", "scaleTargetRef", "kind"); kind != "" && kind != "Deployment" {
		p("%s: scaleTargetRef.kind %q, want Deployment", so, kind)
	}
	minR, okMin := intOf(so.Obj, "spec", "minReplicaCount")
	maxR, okMax := intOf(so.Obj, "spec", "maxReplicaCount")
	if !okMin || !okMax || minR < 1 || minR > maxR {
		p("%s: want 1 <= minReplicaCount <= maxReplicaCount, got %v..%v", so, get(so.Obj, "spec", "minReplicaCount"), get(so.Obj, "spec", "maxReplicaCount"))
	}
	if okMin && minR < 1 {
		// Admission's balancer and asynq's forwarder (scheduled and retry
		// sorted sets -> pending) and recoverer run only inside workers:
		// with none, nothing is admitted and no demand ever shows.
		p("%s: minReplicaCount %d: at least one worker must run, because only workers admit work and move scheduled and retry tasks to their queues", so, minR)
	}
	for _, f := range []string{"pollingInterval", "cooldownPeriod"} {
		if n, ok := intOf(so.Obj, "spec", f); !ok || n <= 0 {
			p("%s: spec.%s must be a positive number of seconds", so, f)
		}
	}
	return probs
}

// checkDemandTrigger checks trigger i of so: a prometheus trigger whose
// query is demandQuery(ns) and whose threshold is --concurrency.
func checkDemandTrigger(so doc, i int, t any, ns string, concurrency int) []string {
	var probs []string
	tp := func(format string, args ...any) {
		probs = append(probs, fmt.Sprintf("%s: trigger %d (%s): "+format, append([]any{so, i, str(t, "name")}, args...)...))
	}
	if typ := str(t, "type"); typ != "prometheus" {
		if strings.HasPrefix(typ, "redis") {
			tp("type %q reads asynq's lists, which hold only granted work while admission is on: scale on admission's metrics (a prometheus trigger)", typ)
		} else {
			tp("type %q, want prometheus", typ)
		}
		return probs
	}
	if a := str(t, "metadata", "serverAddress"); !strings.HasPrefix(a, "http://") && !strings.HasPrefix(a, "https://") {
		tp("serverAddress %q is not an http(s) URL", a)
	}
	if q, want := str(t, "metadata", "query"), demandQuery(ns); !sameQuery(q, want) {
		tp("query %q is not admission's demand in namespace %q: want %q", q, ns, want)
	}
	n, err := strconv.Atoi(str(t, "metadata", "threshold"))
	switch {
	case err != nil || n < 1:
		tp("threshold %q is not a positive integer", str(t, "metadata", "threshold"))
	case concurrency > 0 && n != concurrency:
		tp("threshold %d is not the worker's --concurrency %d (a pod per --concurrency slots of demand)", n, concurrency)
	}
	if v := str(t, "metadata", "activationThreshold"); v != "0" {
		tp("activationThreshold %q, want \"0\"", v)
	}
	if v := str(t, "metadata", "ignoreNullValues"); v != "false" {
		tp("ignoreNullValues %q, want \"false\" (no answer is an error, not zero demand)", v)
	}
	return probs
}

// queuesOf returns the queue names in a worker's args (the default set when
// --queues is absent), in order. The value must be one worker.ParseQueues
// (what `spool worker` runs) accepts, naming the same queues, and also pass
// parseQueues' stricter rules (explicit weights, no repeats).
func queuesOf(args []string) ([]string, error) {
	v, ok := flagValue(args, "queues")
	if !ok {
		v = "critical=6,default=3,low=1"
	}
	served, err := worker.ParseQueues(v)
	if err != nil {
		return nil, err
	}
	names, err := parseQueues(v)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(sortedKeys(served), slices.Sorted(slices.Values(names))) {
		return nil, fmt.Errorf("%q: the worker serves %q, the check read %q", v, sortedKeys(served), names)
	}
	return names, nil
}
