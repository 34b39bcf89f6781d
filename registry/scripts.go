package registry

import (
	_ "embed"

	"github.com/spool-run/spool/internal/redisfn"
)

// Lua is registry.lua: the registry's writes that compound scripts share
// (register, commit, link, restore; and forget, which reads the same
// status table), as the functions of the Lua table registry,
// each documented there with its keys, arguments, reply and refusals.
// The registry's scripts for them are Lua and a call of one function; a
// script of another package that runs one in the same atomic step as its
// own (package orchestrator's start.lua and finalize.lua) starts with Lua
// too, and reads the function's refusals with RefusalError.
//
//go:embed registry.lua
var Lua string

// The registry's scripts of registry.lua: Lua, and a call of one of its
// functions with the script's KEYS and ARGV, as Redis Functions (package
// redisfn: Lua is defined once per server, not on every call).
var (
	regRegisterScript = redisfn.New("register", Lua, "return registry.register(KEYS, ARGV)")
	regCommitScript   = redisfn.New("commit", Lua, "return registry.commit(KEYS, ARGV)")
	regLinkScript     = redisfn.New("link", Lua, "return registry.link(KEYS, ARGV)")
	regForgetScript   = redisfn.New("forget", Lua, "return registry.forget(KEYS, ARGV)")
	regRestoreScript  = redisfn.New("restore", Lua, "return registry.restore(KEYS, ARGV)")
)

// regSpawnScript checks and increments a parent's spawn counter
// (spawn.lua).
var regSpawnScript = redisfn.New("spawn", "", regSpawnLua)

//go:embed spawn.lua
var regSpawnLua string

// regUnspawnScript decrements a parent's spawn counter, not below zero
// (unspawn.lua).
var regUnspawnScript = redisfn.New("unspawn", "", regUnspawnLua)

//go:embed unspawn.lua
var regUnspawnLua string

// regCancelScript sets a thread's cancel flag and publishes "<id> cancel"
// on the control channel, and on the events channel too, where workers of
// earlier versions listen for it (waiters ignore it: it is no status).
// The version is not bumped: a cancel request must not break the running
// activation's lease; the activation sees the flag and stops itself
// (cancel.lua).
var regCancelScript = redisfn.New("cancel", "", regCancelLua)

//go:embed cancel.lua
var regCancelLua string
