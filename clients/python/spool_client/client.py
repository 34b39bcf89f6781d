"""A synchronous client of `spool api`, standard library only."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Iterator, Optional

from . import models

TERMINAL = ("completed", "error", "cancelled")


class SpoolError(Exception):
    """An API error: the problem detail's status, code, title and detail."""

    def __init__(self, status: int, code: str, title: str, detail: str = "", problem: Optional[dict] = None):
        self.status, self.code, self.title, self.detail = status, code, title, detail
        self.problem = problem or {}
        super().__init__(f"{status} {code}: {detail or title}")


class Event:
    """One message of a thread's event stream: a transcript event (kind
    "event", with seq and data, a models.Event), a piece of the model's
    words as they are written (kind "delta", seq None, data a
    models.Delta; only with events(deltas=True)) or the stream's end
    (kind "end", data a models.End)."""

    def __init__(self, kind: str, seq: Optional[int], data: Any):
        self.kind, self.seq, self.data = kind, seq, data

    def __repr__(self) -> str:
        return f"Event({self.kind!r}, seq={self.seq!r})"


class Client:
    """Talks to `spool api` at base_url (http://127.0.0.1:8081 by default).

    token sends a bearer token, basic_auth a (user, password) pair.
    Errors are raised as SpoolError; network failures as OSError.
    """

    def __init__(self, base_url: str = "http://127.0.0.1:8081", token: Optional[str] = None,
                 basic_auth: Optional[tuple] = None, timeout: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._auth = None
        if token:
            self._auth = "Bearer " + token
        elif basic_auth:
            raw = f"{basic_auth[0]}:{basic_auth[1]}".encode()
            self._auth = "Basic " + base64.b64encode(raw).decode()

    # --- the HTTP layer -------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None, query: Optional[dict] = None,
                 headers: Optional[dict] = None, timeout: Optional[float] = None):
        url = self.base_url + path
        if query:
            q = {k: v for k, v in query.items() if v is not None}
            if q:
                url += "?" + urllib.parse.urlencode(q)
        data = None
        h = {"Accept": "application/json"}
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        if self._auth:
            h["Authorization"] = self._auth
        h.update(headers or {})
        req = urllib.request.Request(url, data=data, method=method, headers=h)
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            raise _problem(e) from None

    def _json(self, method: str, path: str, body: Any = None, query: Optional[dict] = None) -> Any:
        with self._request(method, path, body, query) as resp:
            return json.loads(resp.read() or b"null")

    @staticmethod
    def _id(thread_id: str) -> str:
        return urllib.parse.quote(thread_id, safe="")

    # --- threads --------------------------------------------------------

    def run(self, directive: str, inputs: Optional[dict] = None, **fields: Any) -> models.Record:
        """Starts a thread (POST /v1/threads); fields are RunRequest's
        others: model, limits, parent, queue, tenant, priority,
        idempotency_key, ..."""
        body = {"directive": directive, **_given(fields)}
        if inputs is not None:
            body["inputs"] = inputs
        return models.Record.from_dict(self._json("POST", "/v1/threads", body))

    def show(self, thread_id: str) -> models.Record:
        """A thread's record (GET /v1/threads/{id})."""
        return models.Record.from_dict(self._json("GET", "/v1/threads/" + self._id(thread_id)))

    def list(self, **filters: Any) -> list:
        """Threads by status, directive, parent, tenant, waiting_for, limit."""
        return [models.Record.from_dict(r) for r in self._json("GET", "/v1/threads", query=filters)]

    def wait(self, thread_id: str, timeout: float = 600.0, poll: float = 0.25, follow: bool = True) -> models.Record:
        """Waits until the thread ends and returns its record. follow: a
        thread that handed off to a continuation is waited on through its
        chain. TimeoutError after timeout seconds."""
        deadline = time.monotonic() + timeout
        while True:
            rec = self.show(thread_id)
            if rec.status == "continued" and follow and rec.continuation_thread_id:
                thread_id = rec.continuation_thread_id
                continue
            if rec.status in TERMINAL:
                return rec
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{thread_id} is still {rec.status} after {timeout}s")
            time.sleep(poll)

    def cancel(self, thread_id: str, cascade: bool = True) -> models.CancelResult:
        """Cancels a thread (and its children unless cascade is False)."""
        return models.CancelResult.from_dict(
            self._json("POST", f"/v1/threads/{self._id(thread_id)}/cancel", {"cascade": cascade}))

    def pause(self, thread_id: str, tree: bool = False) -> models.PauseResult:
        """Pauses a thread (the one its chain has reached) and its
        unfinished descendants; tree: the whole tree it belongs to, from
        its root. A waiting run is paused at once, a running one at its
        next boundary (status paused). A run that has ended raises
        SpoolError 409 (run_ended)."""
        return models.PauseResult.from_dict(
            self._json("POST", f"/v1/threads/{self._id(thread_id)}/pause", {"tree": tree}))

    def unpause(self, thread_id: str, tree: bool = False) -> models.PauseResult:
        """Lets a paused thread and its descendants (tree: the whole tree)
        go on where they were. A run that has ended raises SpoolError 409
        (run_ended)."""
        return models.PauseResult.from_dict(
            self._json("POST", f"/v1/threads/{self._id(thread_id)}/unpause", {"tree": tree}))

    def resume(self, thread_id: str, message: str) -> models.ResumeResult:
        """Continues an ended thread with a message, in a new thread."""
        return models.ResumeResult.from_dict(
            self._json("POST", f"/v1/threads/{self._id(thread_id)}/resume", {"message": message}))

    def send(self, thread_id: str, message: str, by: Optional[str] = None) -> models.SendResult:
        """Puts a message in a running thread's inbox."""
        return models.SendResult.from_dict(
            self._json("POST", f"/v1/threads/{self._id(thread_id)}/send", _given({"message": message, "by": by})))

    def approvals(self, thread_id: Optional[str] = None, tenant: Optional[str] = None) -> list:
        """Tool calls waiting for a decision, oldest first."""
        rows = self._json("GET", "/v1/approvals", query={"thread": thread_id, "tenant": tenant})
        return [models.PendingCall.from_dict(r) for r in rows]

    def approve(self, thread_id: str, call_id: Optional[str] = None, reason: Optional[str] = None,
                by: Optional[str] = None, request_id: Optional[str] = None) -> models.DecideResult:
        """Approves one pending call (call_id) or all of the thread's."""
        body = _given({"call_id": call_id, "reason": reason, "by": by, "request_id": request_id})
        return models.DecideResult.from_dict(self._json("POST", f"/v1/threads/{self._id(thread_id)}/approve", body))

    def deny(self, thread_id: str, reason: str, call_id: Optional[str] = None, by: Optional[str] = None,
             request_id: Optional[str] = None) -> models.DecideResult:
        """Denies one pending call (call_id) or all of the thread's."""
        body = _given({"reason": reason, "call_id": call_id, "by": by, "request_id": request_id})
        return models.DecideResult.from_dict(self._json("POST", f"/v1/threads/{self._id(thread_id)}/deny", body))

    def budget(self, thread_id: str) -> models.Budget:
        """The live budget of the thread's tree."""
        return models.Budget.from_dict(self._json("GET", f"/v1/threads/{self._id(thread_id)}/budget"))

    # --- graph runs -----------------------------------------------------

    def run_graph(self, graph: str, inputs: Optional[dict] = None, **fields: Any) -> models.Record:
        """Starts a graph run (POST /v1/graphs): .ai/graphs/GRAPH.yaml."""
        body = {"graph": graph, **_given(fields)}
        if inputs is not None:
            body["inputs"] = inputs
        return models.Record.from_dict(self._json("POST", "/v1/graphs", body))

    def show_graph(self, run_id: str) -> models.GraphRun:
        """A graph run with its node table and steps."""
        return models.GraphRun.from_dict(self._json("GET", "/v1/graphs/" + self._id(run_id)))

    def cancel_graph(self, run_id: str) -> models.CancelResult:
        """Cancels a graph run and its children."""
        return models.CancelResult.from_dict(self._json("POST", f"/v1/graphs/{self._id(run_id)}/cancel", {}))

    def pause_graph(self, run_id: str, tree: bool = False) -> models.PauseResult:
        """Pauses a graph run and its unfinished descendants (tree: the
        whole tree it belongs to), as pause does; a thread's id raises
        SpoolError 404 (not_graph)."""
        return models.PauseResult.from_dict(
            self._json("POST", f"/v1/graphs/{self._id(run_id)}/pause", {"tree": tree}))

    def unpause_graph(self, run_id: str, tree: bool = False) -> models.PauseResult:
        """Lets a paused graph run and its descendants go on, as unpause
        does."""
        return models.PauseResult.from_dict(
            self._json("POST", f"/v1/graphs/{self._id(run_id)}/unpause", {"tree": tree}))

    def send_graph_message(self, run_id: str, name: str, data: Any = None, id: Optional[str] = None,
                           by: Optional[str] = None) -> models.MessageSent:
        """Sends a graph run a message, which a wait_message node of its
        name takes: durable once this returns. A name the graph does not
        wait for or data its schema refuses raises SpoolError 422
        (message_unknown, message_invalid), a run that has ended 409
        (run_ended); a repeated id is answered duplicate."""
        body: dict = {"name": name, "data": data}
        if id is not None:
            body["id"] = id
        if by is not None:
            body["by"] = by
        return models.MessageSent.from_dict(self._json("POST", f"/v1/graphs/{self._id(run_id)}/messages", body))

    # --- the event stream -----------------------------------------------

    def events(self, thread_id: str, after: int = 0, retries: int = 10, backoff: float = 0.5,
               deltas: bool = False) -> Iterator[Event]:
        """The thread's transcript events as they are appended, each once
        and in seq order, then an "end" event; a dropped connection is
        resumed after the last seq received (Last-Event-ID), up to
        retries times in a row.

        deltas: also the model's text and tool calls' arguments as they
        are written (?deltas=true), as "delta" items between the events
        (data a models.Delta: turn, attempt, offset, text, and call_id and
        tool for a call's arguments); the transcript's token_delta events
        are then left out (a turn's cognition_out has its whole text once
        durable). Deltas are never stored and carry no seq: the resume
        position stays the last event's seq. A connection's first delta
        may be the text of the turn in flight so far (offset 0); after a
        reconnection it is cut to what this iterator has not yielded, so
        each byte comes once."""
        last, failures = after, 0
        cursor = _DeltaCursor()
        query = {"deltas": "true"} if deltas else None
        while True:
            try:
                headers = {"Accept": "text/event-stream", "Last-Event-ID": str(last)}
                with self._request("GET", f"/v1/threads/{self._id(thread_id)}/events", query=query, headers=headers,
                                   timeout=max(self.timeout, 60)) as resp:
                    for kind, ident, data in _sse(resp):
                        failures = 0
                        if kind == "end":
                            yield Event("end", None, models.End.from_dict(json.loads(data)))
                            return
                        if kind == "error":
                            p = json.loads(data)
                            raise SpoolError(p.get("status", 500), p.get("code", "error"), p.get("title", ""),
                                             p.get("detail", ""), p)
                        if kind == "delta":
                            d = cursor.take(models.Delta.from_dict(json.loads(data))) if deltas else None
                            if d is not None:
                                yield Event("delta", None, d)
                            continue
                        if kind != "message":
                            continue  # a message this client does not know
                        ev = models.Event.from_dict(json.loads(data))
                        seq = int(ident) if ident else ev.seq
                        if seq is not None and seq <= last:
                            continue
                        last = seq
                        yield Event("event", seq, ev)
            except (OSError, ValueError):
                failures += 1
                if failures > retries:
                    raise
                time.sleep(backoff * min(failures, 8))


class _DeltaCursor:
    """Where a reader of deltas is (spooltype.DeltaCursor): it takes each
    delta once, in order, cut to what it has not had (the snapshot a
    reconnection starts with); one of an earlier turn or attempt is
    dropped. Offsets count the UTF-8 bytes of the text."""

    def __init__(self):
        self.turn, self.attempt, self.have = 0, 0, None

    def take(self, d: "models.Delta") -> "Optional[models.Delta]":
        turn, attempt = d.turn or 0, d.attempt or 0
        if turn < self.turn or (turn == self.turn and attempt < self.attempt):
            return None
        if self.have is None or turn > self.turn or attempt > self.attempt:
            self.turn, self.attempt, self.have = turn, attempt, {}
        key, offset, text = d.call_id or "", d.offset or 0, (d.text or "").encode()
        have = self.have.get(key, 0)
        end = offset + len(text)
        if not text or end <= have:
            return None
        if offset < have:
            d.offset, d.text = have, text[have - offset:].decode("utf-8", errors="replace")
        self.have[key] = end
        return d


def _given(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def _problem(e: "urllib.error.HTTPError") -> SpoolError:
    try:
        p = json.loads(e.read() or b"{}")
    except ValueError:
        p = {}
    return SpoolError(e.code, p.get("code", "http_" + str(e.code)), p.get("title", e.reason or ""),
                      p.get("detail", ""), p)


def _sse(resp) -> Iterator[tuple]:
    """Parses a text/event-stream: yields (event name, id, data) per
    message; comment lines are skipped."""
    kind, ident, data = "message", None, []
    for raw in resp:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                yield kind, ident, "\n".join(data)
            kind, ident, data = "message", None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            kind = value
        elif field == "id":
            ident = value
        elif field == "data":
            data.append(value)
