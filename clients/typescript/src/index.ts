// A client of Spool's HTTP API (`spool api`) over fetch, for Node 18+ and
// browsers. The types come from the API's OpenAPI document
// (src/schema.d.ts, made by openapi-typescript: `npm run generate`).
import type { components } from "./schema.js";

export type Schemas = components["schemas"];
export type ThreadRecord = Schemas["Record"];
export type GraphRun = Schemas["GraphRun"];
export type TranscriptEvent = Schemas["Event"];
export type StreamEnd = Schemas["End"];
/** A piece of the model's text (or, with call_id, of a tool call's arguments) as it is written. */
export type Delta = Schemas["Delta"];
export type Problem = Schemas["Problem"];
export type RunRequest = Schemas["RunRequest"];
export type GraphRunRequest = Schemas["GraphRunRequest"];

/** The statuses a thread ends in. */
export const TERMINAL = ["completed", "error", "cancelled"] as const;

/** An API error: the problem detail's status, code, title and detail. */
export class SpoolError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly title: string,
    readonly detail = "",
    readonly problem: Partial<Problem> = {},
  ) {
    super(`${status} ${code}: ${detail || title}`);
    this.name = "SpoolError";
  }
}

/** A transcript event of a thread's event stream. */
export type EventItem = { kind: "event"; seq: number; data: TranscriptEvent };
/** A piece of the model's words, as written (only with `deltas: true`). */
export type DeltaItem = { kind: "delta"; data: Delta };
/** The end of a thread's event stream. */
export type EndItem = { kind: "end"; data: StreamEnd };
/** One message of a thread's event stream (a delta only with `deltas: true`). */
export type StreamItem = EventItem | DeltaItem | EndItem;

/** The options of Client.events. */
export interface EventsOptions {
  /** Start after this seq (0: from the first event). */
  after?: number;
  /** Also the model's words as they are written, as "delta" items (?deltas=true). */
  deltas?: boolean;
  /** Connection attempts in a row before giving up. */
  retries?: number;
  backoffMs?: number;
  signal?: AbortSignal;
}

export interface ClientOptions {
  /** A bearer token (spool api --token). */
  token?: string;
  /** A basic auth user and password (spool api --basic-auth). */
  basicAuth?: [string, string];
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
}

const enc = encodeURIComponent;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class Client {
  readonly baseUrl: string;
  private readonly auth?: string;
  private readonly fetch: typeof fetch;

  constructor(baseUrl = "http://127.0.0.1:8081", opts: ClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
    if (opts.token) this.auth = `Bearer ${opts.token}`;
    else if (opts.basicAuth) this.auth = `Basic ${btoa(`${opts.basicAuth[0]}:${opts.basicAuth[1]}`)}`;
  }

  private async request(method: string, path: string, body?: unknown, query?: Record<string, unknown>,
    headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> {
    let url = this.baseUrl + path;
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined && v !== null) q.set(k, String(v));
    if (q.toString()) url += `?${q}`;
    const h: Record<string, string> = { Accept: "application/json", ...headers };
    if (body !== undefined) h["Content-Type"] = "application/json";
    if (this.auth) h.Authorization = this.auth;
    const resp = await this.fetch(url, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), signal });
    if (!resp.ok) {
      let p: Partial<Problem> = {};
      try { p = (await resp.json()) as Partial<Problem>; } catch { /* not a problem detail */ }
      throw new SpoolError(resp.status, p.code ?? `http_${resp.status}`, p.title ?? resp.statusText, p.detail ?? "", p);
    }
    return resp;
  }

  private async json<T>(method: string, path: string, body?: unknown, query?: Record<string, unknown>): Promise<T> {
    return (await (await this.request(method, path, body, query)).json()) as T;
  }

  // --- threads ---------------------------------------------------------

  /** Starts a thread (POST /v1/threads). */
  run(req: RunRequest): Promise<ThreadRecord> {
    return this.json("POST", "/v1/threads", req);
  }

  /** A thread's record. */
  show(id: string): Promise<ThreadRecord> {
    return this.json("GET", `/v1/threads/${enc(id)}`);
  }

  /** Threads by status, directive, parent, tenant, waiting_for, limit. */
  list(filters: Record<string, string | number> = {}): Promise<ThreadRecord[]> {
    return this.json("GET", "/v1/threads", undefined, filters);
  }

  /** Waits until the thread (or the continuation it handed off to) ends. */
  async wait(id: string, { timeoutMs = 600_000, pollMs = 250 } = {}): Promise<ThreadRecord> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const rec = await this.show(id);
      if (rec.status === "continued" && rec.continuation_thread_id) { id = rec.continuation_thread_id; continue; }
      if ((TERMINAL as readonly string[]).includes(rec.status)) return rec;
      if (Date.now() >= deadline) throw new Error(`${id} is still ${rec.status} after ${timeoutMs} ms`);
      await sleep(pollMs);
    }
  }

  cancel(id: string, cascade = true): Promise<Schemas["CancelResult"]> {
    return this.json("POST", `/v1/threads/${enc(id)}/cancel`, { cascade });
  }

  /**
   * Pauses a thread (the one its chain has reached) and its unfinished
   * descendants; tree: the whole tree it belongs to, from its root. A
   * waiting run is paused at once, a running one at its next boundary
   * (status paused). A run that has ended rejects with a SpoolError 409
   * (run_ended).
   */
  pause(id: string, tree = false): Promise<Schemas["PauseResult"]> {
    return this.json("POST", `/v1/threads/${enc(id)}/pause`, { tree });
  }

  /** Lets a paused thread and its descendants (tree: the whole tree) go on where they were. */
  unpause(id: string, tree = false): Promise<Schemas["PauseResult"]> {
    return this.json("POST", `/v1/threads/${enc(id)}/unpause`, { tree });
  }

  resume(id: string, message: string): Promise<Schemas["ResumeResult"]> {
    return this.json("POST", `/v1/threads/${enc(id)}/resume`, { message });
  }

  send(id: string, message: string, by?: string): Promise<Schemas["SendResult"]> {
    return this.json("POST", `/v1/threads/${enc(id)}/send`, by ? { message, by } : { message });
  }

  /** Tool calls waiting for a decision, oldest first. */
  approvals(filter: { thread?: string; tenant?: string } = {}): Promise<Schemas["PendingCall"][]> {
    return this.json("GET", "/v1/approvals", undefined, filter);
  }

  /** Approves one pending call (call_id) or all of the thread's. */
  approve(id: string, req: Schemas["ApproveRequest"] = {}): Promise<Schemas["DecideResult"]> {
    return this.json("POST", `/v1/threads/${enc(id)}/approve`, req);
  }

  /** Denies one pending call (call_id) or all of the thread's. */
  deny(id: string, req: Schemas["DenyRequest"]): Promise<Schemas["DecideResult"]> {
    return this.json("POST", `/v1/threads/${enc(id)}/deny`, req);
  }

  budget(id: string): Promise<Schemas["Budget"]> {
    return this.json("GET", `/v1/threads/${enc(id)}/budget`);
  }

  // --- graph runs ------------------------------------------------------

  /** Starts a graph run (POST /v1/graphs): .ai/graphs/GRAPH.yaml. */
  runGraph(req: GraphRunRequest): Promise<ThreadRecord> {
    return this.json("POST", "/v1/graphs", req);
  }

  showGraph(id: string): Promise<GraphRun> {
    return this.json("GET", `/v1/graphs/${enc(id)}`);
  }

  cancelGraph(id: string): Promise<Schemas["CancelResult"]> {
    return this.json("POST", `/v1/graphs/${enc(id)}/cancel`, {});
  }

  /** Pauses a graph run and its descendants, as pause does; a thread's id rejects with 404 not_graph. */
  pauseGraph(id: string, tree = false): Promise<Schemas["PauseResult"]> {
    return this.json("POST", `/v1/graphs/${enc(id)}/pause`, { tree });
  }

  /** Lets a paused graph run and its descendants go on, as unpause does. */
  unpauseGraph(id: string, tree = false): Promise<Schemas["PauseResult"]> {
    return this.json("POST", `/v1/graphs/${enc(id)}/unpause`, { tree });
  }

  /**
   * Sends a graph run a message, which a wait_message node of its name
   * takes: durable once this resolves. A name the graph does not wait for
   * or data its schema refuses rejects with a SpoolError 422
   * (message_unknown, message_invalid), a run that has ended 409
   * (run_ended); a repeated id is answered duplicate.
   */
  sendGraphMessage(id: string, message: Schemas["GraphMessageRequest"]): Promise<Schemas["MessageSent"]> {
    return this.json("POST", `/v1/graphs/${enc(id)}/messages`, message);
  }

  // --- the event stream ------------------------------------------------

  /**
   * The thread's transcript events as they are appended, each once and in
   * seq order, then its end. A dropped connection is resumed after the
   * last seq handed out (Last-Event-ID), up to `retries` times in a row.
   *
   * With `deltas: true`, also the model's text and tool calls' arguments
   * as they are written, as `{kind: "delta", data}` items between the
   * events (turn, attempt, offset in UTF-8 bytes, text; call_id and tool
   * for a call's arguments); the transcript's token_delta events are then
   * left out (a turn's cognition_out has its whole text once durable).
   * Deltas are never stored and carry no seq: the resume position stays
   * the last event's seq. A connection's first delta may be the text of
   * the turn in flight so far (offset 0); after a reconnection it is cut
   * to what this generator has not yielded, so each byte comes once.
   */
  events(id: string, opts: EventsOptions & { deltas: true }): AsyncGenerator<StreamItem>;
  events(id: string, opts?: EventsOptions & { deltas?: false }): AsyncGenerator<EventItem | EndItem>;
  events(id: string, opts?: EventsOptions): AsyncGenerator<StreamItem>;
  async *events(id: string, { after = 0, deltas = false, retries = 10, backoffMs = 500, signal }: EventsOptions = {}):
    AsyncGenerator<StreamItem> {
    let last = after;
    let failures = 0;
    const cursor = new DeltaCursor();
    for (;;) {
      let resp: Response;
      try {
        resp = await this.request("GET", `/v1/threads/${enc(id)}/events`, undefined, deltas ? { deltas: "true" } : undefined,
          { Accept: "text/event-stream", "Last-Event-ID": String(last) }, signal);
      } catch (e) {
        if (e instanceof SpoolError || signal?.aborted || ++failures > retries) throw e;
        await sleep(backoffMs * Math.min(failures, 8));
        continue;
      }
      try {
        for await (const m of sse(resp.body!)) {
          failures = 0;
          if (m.event === "end") { yield { kind: "end", data: JSON.parse(m.data) as StreamEnd }; return; }
          if (m.event === "error") {
            const p = JSON.parse(m.data) as Problem;
            throw new SpoolError(p.status, p.code, p.title, p.detail ?? "", p);
          }
          if (m.event === "delta") {
            const d = deltas ? cursor.take(JSON.parse(m.data) as Delta) : undefined;
            if (d) yield { kind: "delta", data: d };
            continue;
          }
          if (m.event !== "message") continue; // a message this client does not know
          const data = JSON.parse(m.data) as TranscriptEvent;
          const seq = m.id ? Number(m.id) : data.seq;
          if (seq <= last) continue;
          last = seq;
          yield { kind: "event", seq, data };
        }
      } catch (e) {
        if (e instanceof SpoolError || signal?.aborted || ++failures > retries) throw e;
        await sleep(backoffMs * Math.min(failures, 8));
      }
    }
  }
}

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder();

/**
 * Where a reader of deltas is (spooltype.DeltaCursor): it takes each delta
 * once, in order, cut to what it has not had (the snapshot a reconnection
 * starts with); one of an earlier turn or attempt is dropped. Offsets count
 * the UTF-8 bytes of the text.
 */
class DeltaCursor {
  private turn = 0;
  private attempt = 0;
  private have?: Map<string, number>;

  take(d: Delta): Delta | undefined {
    const turn = d.turn ?? 0;
    const attempt = d.attempt ?? 0;
    if (turn < this.turn || (turn === this.turn && attempt < this.attempt)) return undefined;
    if (!this.have || turn > this.turn || attempt > this.attempt) {
      this.turn = turn; this.attempt = attempt; this.have = new Map();
    }
    const key = d.call_id ?? "";
    const have = this.have.get(key) ?? 0;
    const text = utf8.encode(d.text ?? "");
    const end = d.offset + text.length;
    if (text.length === 0 || end <= have) return undefined;
    if (d.offset < have) d = { ...d, offset: have, text: fromUtf8.decode(text.subarray(have - d.offset)) };
    this.have.set(key, end);
    return d;
  }
}

interface SseMessage { event: string; id?: string; data: string }

/** Parses a text/event-stream body into its messages; comments are skipped. */
async function* sse(body: ReadableStream<Uint8Array>): AsyncGenerator<SseMessage> {
  const decoder = new TextDecoder();
  let buf = "";
  let event = "message";
  let id: string | undefined;
  let data: string[] = [];
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, "");
      buf = buf.slice(nl + 1);
      if (line === "") {
        if (data.length) yield { event, id, data: data.join("\n") };
        event = "message"; id = undefined; data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const i = line.indexOf(":");
      const field = i < 0 ? line : line.slice(0, i);
      let value = i < 0 ? "" : line.slice(i + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") event = value;
      else if (field === "id") id = value;
      else if (field === "data") data.push(value);
    }
  }
}
