// Package deploy holds the artefacts that run spool on an engine, and the
// tests that check them without one:
//
//   - Dockerfile: a multi-stage build of the one spool binary (plus the
//     tiny healthcheck probe in ./healthcheck) into a distroless, non-root
//     image.
//   - compose.yaml: Redis with AOF persistence, versitygw as the
//     S3-compatible store, N workers, one scheduler and the monitor.
//   - k8s/: a kustomize base with the worker, scheduler and monitor
//     Deployments, settings in a ConfigMap, the signing key and credentials
//     in a Secret, and a KEDA ScaledObject that scales workers on each
//     asynq queue's pending and active lists.
//   - fleet.sh: a fleet of real worker processes on this machine, scaled up
//     and down while a batch of threads runs.
//
// No container engine or cluster runs where the tests run, so the tests are
// static. Every Kubernetes document is validated by kubeconform against
// strict schemas of its kind, kept in testdata/k8s-schemas (written by
// internal/schemagen from the Kubernetes and KEDA modules, so no test needs
// the network). compose.yaml is loaded by compose-go, which checks it
// against the compose specification, and the Dockerfile is parsed by
// BuildKit's own parser. Beyond the schemas, spool's own
// rules: every YAML parses,
// the kustomization names files that exist, every
// image is the spool image or a pinned known one, every ConfigMap/Secret key
// a Deployment references exists, the worker's grace period outlasts its
// shutdown timeout, and the KEDA trigger list names are exactly asynq's
// pending and active lists of the queues the worker serves. Each check is a
// function returning the problems it found, and negative tests mutate a
// parsed manifest to show that each check complains.
package deploy
