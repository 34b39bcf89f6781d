// Package provider is spool's small, provider-neutral interface to LLMs and
// its adapters:
//
//   - Anthropic Messages (anthropic-sdk-go), for "claude-*" and "anthropic/<m>";
//   - OpenAI-compatible Chat Completions (openai-go), for "gpt-*", "o1/o3/o4*",
//     "openai/<m>" and any model when an OpenAI base URL is configured, which
//     covers vLLM, Ollama, llama.cpp server and OpenRouter;
//   - the scripted provider of CLI.md ("script:PATH"), which plays a YAML
//     script instead of calling a model, for offline runs, tests and demos.
//
// The worker's turn loop calls [Provider.Complete] once per turn. Adapters
// stream when the caller passes an onDelta callback, map item ids to wire
// tool names and back (see [ToolNames]), normalise token usage so that
// [Usage.InputTokens] never includes cache reads or writes, and return errors
// already classified as an [*Error] (rate_limited, transient, permanent,
// cancelled; spend-limit errors are permanent with Quota set). Adapters never
// retry: the SDK retries are off and the worker's error hooks decide.
//
// Spend comes from a per-model [Pricing] table embedded in the binary
// (pricing.yaml), overridable by the project's .ai/config/agent/pricing.yaml.
// An unknown model is an [ErrUnknownModel] error, never a silent zero.
//
//	flag / directive model id / tier ──ResolveModel──▶ model string
//	model string ──New──▶ Anthropic | OpenAI-compatible | Scripted
//	Complete(ctx, req, onDelta) ──▶ Response{Text, ToolCalls, Usage} | *Error
//	Cost(model, usage) ──Pricing──▶ USD
package provider
