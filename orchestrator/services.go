package orchestrator

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/transcript"
)

// Services are the services below the orchestrator that an activation
// runs on. They are the worker's, which runs activations beside the
// orchestrator: its steps claim, commit, charge and suspend through them,
// each under the rules of its own package. Every other package above the
// orchestrator uses the orchestrator's operations instead (a test in this
// package holds them to it); a test may reach them here to set up a state
// that no operation makes (a lost write, a forged record).
type Services struct {
	Registry    *registry.Registry
	Activations *registry.Activations
	Ledger      *ledger.Ledger
	Enqueuer    *queue.Enqueuer
	Store       blobstore.Store
	Signer      *transcript.Signer
	Keyring     *transcript.Keyring
	// Redis is the plain client, asynq's: the worker's asynq server and
	// rate limiter run on it.
	Redis redis.UniversalClient
	Keys  keyspace.Space
	// LeaseTTL is how long an activation's lease holds without a
	// heartbeat (Config.LeaseTTL).
	LeaseTTL time.Duration
}

// Services returns the services an activation runs on: the worker's
// (see Services).
func (rt *Runtime) Services() Services {
	return Services{Registry: rt.reg, Activations: rt.acts, Ledger: rt.ledger, Enqueuer: rt.enq,
		Store: rt.store, Signer: rt.signer, Keyring: rt.keyring, Redis: rt.rdb, Keys: rt.keys, LeaseTTL: rt.cfg.LeaseTTL}
}
