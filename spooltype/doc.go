// Package spooltype holds the types spool's API speaks: a thread's
// registry record, its tree, its budget and continuation chain, its
// transcript events, a graph run's node table and steps, the requests
// and problems of the HTTP API. They are what `spool ... --json` prints
// (CLI.md) and what the API, its Go client (package client) and the MCP
// server answer.
//
// It imports the standard library and package thread only (which imports
// nothing else), as River keeps its rows in rivertype: a program that
// talks to spool through package client links none of the server — no
// Redis client, no asynq, no Lua. The packages that make and keep these
// values name them by aliases (registry.Record, orchestrator.TreeNode,
// transcript.Event, graph.NodeRow, api.RunRequest, ...), so either name is
// the same type.
package spooltype
