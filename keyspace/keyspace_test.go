package keyspace

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

func TestCRC16(t *testing.T) {
	t.Parallel()
	// The reference value of the Redis Cluster specification.
	// The reference value of the specification: 0x31C3 % 16384.
	require.Equal(t, uint16(0x31C3%16384), Slot("123456789"))
	require.Equal(t, Slot("{user1000}.following"), Slot("{user1000}.followers"), "hash tag rule")
	require.NotEqual(t, Slot("foo{}{bar}"), Slot("bar"), "an empty tag is no tag")
}

// keysOf builds every key of s through every builder (found by
// reflection, so a new builder is covered without editing a test): those
// of a thread, a chain, a parent, a rule (id-scoped: one string argument)
// with each of ids, and the global ones (no argument) in global.
func keysOf(t *testing.T, s Space, ids []string) (scoped, global []string) {
	t.Helper()
	v := reflect.ValueOf(s)
	for i := 0; i < v.NumMethod(); i++ {
		m := v.Type().Method(i)
		ft := m.Type
		if ft.NumOut() != 1 || ft.Out(0).Kind() != reflect.String || m.Name == "Namespace" || strings.HasPrefix(m.Name, "Queue") ||
			strings.HasSuffix(m.Name, "Prefix") {
			continue
		}
		switch ft.NumIn() {
		case 1: // the receiver only
			global = append(global, v.Method(i).Call(nil)[0].String())
		case 2:
			if m.Name == "Lock" || strings.HasPrefix(m.Name, "Bulk") || strings.HasPrefix(m.Name, "Webhook") { // a named lock, a bulk operation's or a webhook delivery's keys: global
				global = append(global, v.Method(i).Call([]reflect.Value{reflect.ValueOf(ids[0])})[0].String())
				continue
			}
			require.Equal(t, reflect.String, ft.In(1).Kind(), "builder %s", m.Name)
			for _, id := range ids {
				scoped = append(scoped, v.Method(i).Call([]reflect.Value{reflect.ValueOf(id)})[0].String())
			}
		case 3:
			switch {
			case m.Name == "RateLimit": // RateLimit(rule, kind): global
				global = append(global, v.Method(i).Call([]reflect.Value{reflect.ValueOf(ids[0]), reflect.ValueOf("req")})[0].String())
			case tenantScoped[m.Name]: // a tenant's index on a thread's shard
				for _, id := range ids {
					scoped = append(scoped, v.Method(i).Call([]reflect.Value{reflect.ValueOf("acme"), reflect.ValueOf(id)})[0].String())
				}
			}
		}
	}
	return scoped, global
}

// tenantScoped are the builders of (tenant, tag or directive; thread id)
// whose key is on the thread's shard (the listing indexes); every other
// builder of two strings but RateLimit is a tenant's key (tenantKeys),
// but QueueOf's asynq queue.
var tenantScoped = map[string]bool{"TenantThreads": true, "TagThreads": true, "DirectiveThreads": true}

// tenantKeys builds every key of tenant through every builder of
// (tenant, name) that is not tenantScoped nor RateLimit.
func tenantKeys(s Space, tenant string) []string {
	var out []string
	v := reflect.ValueOf(s)
	for i := 0; i < v.NumMethod(); i++ {
		m := v.Type().Method(i)
		ft := m.Type
		if ft.NumIn() != 3 || ft.NumOut() != 1 || ft.Out(0).Kind() != reflect.String || m.Name == "RateLimit" || tenantScoped[m.Name] ||
			strings.HasPrefix(m.Name, "Queue") {
			continue
		}
		out = append(out, v.Method(i).Call([]reflect.Value{reflect.ValueOf(tenant), reflect.ValueOf("x")})[0].String())
	}
	return out
}

// TestTenantKeysInTenantSlot: a tenant's keys (its idempotency records,
// its admission state) are in one slot: the namespace's in a one-slot
// space, the tenant's own in a sharded one, where tenants spread.
func TestTenantKeysInTenantSlot(t *testing.T) {
	t.Parallel()
	one := New("prod")
	keys := tenantKeys(one, "acme")
	require.NotEmpty(t, keys)
	for _, k := range keys {
		require.Equal(t, Slot(one.Prefix()), Slot(k), "key %q", k)
		require.True(t, strings.HasPrefix(k, "spool:{prod}:adm:t:acme:"), k)
	}
	require.Equal(t, "spool:{prod}:adm:t:acme:idem:ab12", one.Idempotency("acme", "ab12"))
	sh := NewSharded("prod", 32)
	slots := map[uint16]bool{}
	for _, tenant := range []string{"acme", "beta", "default", "t.1", "z-9"} {
		want := Slot(sh.TenantPrefix(tenant))
		slots[want] = true
		for _, k := range tenantKeys(sh, tenant) {
			require.Equal(t, want, Slot(k), "tenant %s: key %q", tenant, k)
		}
	}
	require.Len(t, slots, 5, "tenants spread over slots")
	require.Equal(t, "spool:{prod:t:acme}:idem:ab12", sh.Idempotency("acme", "ab12"))
	require.Equal(t, sh.AllThreads()[sh.ShardOf("d/x-1-a")]+":tenant:acme", sh.TenantThreads("acme", "d/x-1-a"))
	require.Len(t, sh.AllTenantThreads("acme"), 32)
}

// TestOneSlot builds every key of a one-slot space with awkward ids
// (braces, slashes, colons), and requires them all in one Redis Cluster
// slot: the slot of the space's prefix.
func TestOneSlot(t *testing.T) {
	t.Parallel()
	ids := []string{"t/crash-1795325137-vwtqbotxae", "a{b}c", "}{", "x:y/z", ""}
	for _, ns := range []string{"", "spool", "prod", "t{x}y", "team/a"} {
		s := New(ns)
		require.Equal(t, 1, s.Shards())
		scoped, global := keysOf(t, s, ids)
		keys := append(append([]string(nil), scoped...), global...)
		require.GreaterOrEqual(t, len(keys), 20, "namespace %q", ns)
		want := Slot(s.Prefix())
		for _, k := range keys {
			require.Equal(t, want, Slot(k), "namespace %q: key %q", ns, k)
		}
		require.Equal(t, []string{s.Threads("x")}, s.AllThreads())
	}
}

// TestShardedTreeInOneSlot: in a sharded space every key of one tree (a
// root, its child and grandchild named by NewIDIn, whatever shape the
// root's id has) is in one slot, its shard's; the global keys are in the
// namespace's slot; the shards' slots spread evenly over the slot space;
// and random roots fall evenly on the shards.
func TestShardedTreeInOneSlot(t *testing.T) {
	t.Parallel()
	now := time.Unix(1795325137, 0)
	for _, ns := range []string{"spool", "t{x}y", "team/a"} {
		s := NewSharded(ns, 32)
		require.Equal(t, 32, s.Shards())
		for _, root := range []string{thread.NewID("d/root", now), "x:y/z", "a{b}c", "plain"} {
			kid := thread.NewIDIn("d/kid", now, root)
			grand := thread.NewIDIn("d/grand", now, kid)
			require.Equal(t, s.ShardOf(root), s.ShardOf(grand), "root %s", root)
			scoped, global := keysOf(t, s, []string{root, kid, grand})
			want := Slot(s.Threads(root))
			for _, k := range scoped {
				require.Equal(t, want, Slot(k), "root %q: key %q", root, k)
			}
			require.Equal(t, s.AllThreads()[s.ShardOf(root)], s.Threads(grand))
			for _, k := range global {
				require.Equal(t, Slot(s.Prefix()), Slot(k), "global key %q", k)
			}
		}
		for i, k := range s.AllActive() {
			require.Equal(t, i*16384/32, int(Slot(k))/512*512, "shard %d's slot in its 32nd of the slot space", i)
		}
		counts := make([]int, 32)
		for i := range 32000 {
			counts[s.ShardOf(thread.NewID(fmt.Sprintf("d/%d", i), now))]++
		}
		for i, c := range counts {
			require.InDelta(t, 1000, c, 200, "shard %d got %d of 32000 roots", i, c)
		}
	}
	require.Panics(t, func() { NewSharded("x", 24) }, "not a power of two")
	require.Equal(t, New("x"), NewSharded("x", 1))
}

// TestQueueLanes: a one-slot space has one asynq queue per spool queue,
// named as before; a sharded one spreads it over Lanes lanes whose slots
// fall each in its part of the slot space, a thread's activations on its
// shard's lane, and every lane (no other namespace's queue) maps back to
// the spool queue.
func TestQueueLanes(t *testing.T) {
	t.Parallel()
	one := New("")
	require.Equal(t, []string{"default"}, one.QueueLanes("default"))
	require.Equal(t, "default", one.QueueOf("default", "d/x-1-abcdefghij"))
	name, ok := one.QueueName("default")
	require.True(t, ok)
	require.Equal(t, "default", name)
	_, ok = one.QueueName("team.default")
	require.False(t, ok, "another namespace's")
	require.Equal(t, []string{"team.default"}, New("team").QueueLanes("default"))

	now := time.Unix(1795325137, 0)
	for _, ns := range []string{"", "team"} {
		s := NewSharded(ns, 32)
		lanes := s.QueueLanes("default")
		require.Len(t, lanes, MaxLanes)
		for i, l := range lanes {
			require.Equal(t, i*16384/MaxLanes, int(Slot("{"+l+"}"))/2048*2048, "lane %s", l)
			name, ok := s.QueueName(l)
			require.True(t, ok, l)
			require.Equal(t, "default", name)
		}
		root := thread.NewID("d/root", now)
		kid := thread.NewIDIn("d/kid", now, root)
		require.Equal(t, s.QueueOf("default", root), s.QueueOf("default", kid))
		require.Contains(t, lanes, s.QueueOf("default", root))
		_, ok := s.QueueName(New(ns).Queue("default"))
		require.False(t, ok, "the unlaned name is no queue of a sharded space")
		_, ok = s.QueueName(New("other").Queue("default") + "~1")
		require.False(t, ok)
	}
}
