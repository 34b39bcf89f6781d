package admission

import (
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/spooltype"
)

// RequestOf is the request of activation a (sequence number seq) of run
// rec under pol (nil: no maxes to record): the run's tenant, priority
// and concurrency keys, the class of the activation (1 for a root
// chain's first: the start of a root that continues no thread), its root
// chain.
func RequestOf(rec *spooltype.Record, a queue.Activation, seq int64, pol *Policy) Request {
	class := 0
	if (a.Reason == "" || a.Reason == "start" || a.Reason == "requeue") && rec.ParentID == "" && rec.ContinuationOf == "" {
		class = 1
	}
	req := Request{Act: queue.ActivationID(a, seq), Tenant: rec.TenantOrDefault(), Run: rec.ThreadID, Root: rec.TreeID(),
		Queue: queueOf(rec.Queue), Priority: rec.PriorityOrDefault(), Class: class, Child: rec.ParentID != "", Reason: reasonOf(a.Reason), Seq: seq}
	for _, k := range rec.ConcurrencyKeys {
		req.Keys = append(req.Keys, RedisKey(k.Rule, k.Value))
		req.Maxes = append(req.Maxes, max(pol.RuleMax(k.Rule), 1))
	}
	return req
}

// Ticket is req as its task carries it (queue.Ticket), with the
// generation of its grant.
func (req Request) Ticket(gen int64) *queue.Ticket {
	return &queue.Ticket{Tenant: req.Tenant, Queue: req.Queue, Priority: req.Priority, Class: req.Class, Keys: req.Keys, Root: req.Root, Gen: gen}
}

// RequestOfTask is the request of a task that carries its ticket (nil
// when it carries none: the caller reads the run's record, RequestOf).
func RequestOfTask(a queue.Activation, pol *Policy) *Request {
	t := a.Ticket
	if t == nil {
		return nil
	}
	req := &Request{Act: queue.ActivationID(a, a.Seq), Tenant: t.Tenant, Run: a.ThreadID, Root: t.Root, Queue: queueOf(t.Queue),
		Priority: t.Priority, Class: t.Class, Keys: t.Keys, Reason: reasonOf(a.Reason), Seq: a.Seq}
	for _, k := range t.Keys {
		req.Maxes = append(req.Maxes, max(pol.RuleMax(ruleOfKey(k)), 1))
	}
	return req
}

func queueOf(q string) string {
	if q == "" {
		return queue.DefaultQueue
	}
	return q
}

func reasonOf(r string) string {
	if r == "" {
		return "start"
	}
	return r
}

// ruleOfKey is the rule of a key RULE=VALUE.
func ruleOfKey(k string) string {
	for i := 0; i < len(k); i++ {
		if k[i] == '=' {
			return k[:i]
		}
	}
	return k
}
