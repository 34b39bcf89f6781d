"""The event stream's deltas (events(deltas=True)): against a stream served
here, as the API serves one, and against the real `spool api` of
test_client.py (e2e.TestPythonClient)."""

import asyncio
import http.server
import json
import os
import pathlib
import sys
import threading

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from spool_client import AsyncClient, Client, models  # noqa: E402

# t/talk writes a text and a tool call, then a text, each streamed in
# pieces (scripts/talk.yaml, set up by e2e.clientAPI).
TALK = "script:scripts/talk.yaml"


class _DeltaStream(http.server.BaseHTTPRequestHandler):
    """Thread t/d-1-a's events with deltas: the first connection drops
    mid-delta after event 1 and two pieces of turn 1; the next starts
    again with the snapshot of turn 1 so far (offset 0), as a reconnection
    does. Each request's query and Last-Event-ID go to requests."""

    requests: list = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        query = self.path.partition("?")[2]
        resume = self.headers.get("Last-Event-ID", "")
        self.requests.append((query, resume))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        out = ["retry: 5\n\n"]

        def event(seq):
            ev = {"timestamp": "2026-01-01T00:00:00Z", "thread_id": "t/d-1-a", "seq": seq,
                  "event_type": "cognition_out", "payload": {}}
            out.append(f"id: {seq}\ndata: {json.dumps(ev)}\n\n")

        def delta(**d):
            out.append(f"event: delta\ndata: {json.dumps(d, ensure_ascii=False)}\n\n")

        if resume in ("", "0"):
            event(1)
            delta(turn=1, offset=0, text="Hé")
            delta(turn=1, offset=3, text="llo")
            out.append('event: delta\ndata: {"turn":1,"off')  # the connection drops
        else:
            delta(turn=1, offset=0, text="Héllo")  # the snapshot: had already
            delta(turn=1, offset=6, text=", wörld")
            delta(turn=1, call_id="c1", tool="t/x", offset=0, text='{"a":')
            event(2)
            delta(turn=2, offset=0, text="Bye")
            delta(turn=2, attempt=1, offset=0, text="Bye!")  # the model call retried
            delta(turn=2, offset=3, text="?")  # of the attempt before: stale
            out.append('event: future\ndata: {"x":1}\n\n')  # a message this client does not know
            out.append('event: end\ndata: {"thread_id":"t/d-1-a","status":"completed","last_event_id":2}\n\n')
        self.wfile.write("".join(out).encode())


@pytest.fixture
def served():
    _DeltaStream.requests = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DeltaStream)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _log(items):
    out = []
    for ev in items:
        if ev.kind == "delta":
            d = ev.data
            assert isinstance(d, models.Delta) and ev.seq is None
            what = f"call {d.call_id} {d.tool}" if d.call_id else "delta"
            out.append(f"{what} {d.turn}/{d.attempt or 0} {d.offset} {d.text}")
        elif ev.kind == "event":
            out.append(f"event {ev.seq}")
        else:
            out.append(f"end {ev.data.status}")
    return out


def test_deltas_each_byte_once_across_a_reconnection(served):
    got = _log(Client(served).events("t/d-1-a", deltas=True, backoff=0.01))
    assert got == ["event 1", "delta 1/0 0 Hé", "delta 1/0 3 llo", "delta 1/0 6 , wörld", 'call c1 t/x 1/0 0 {"a":',
                   "event 2", "delta 2/0 0 Bye", "delta 2/1 0 Bye!", "end completed"]
    assert _DeltaStream.requests == [("deltas=true", "0"), ("deltas=true", "1")]


def test_no_deltas_unless_asked(served):
    got = _log(Client(served).events("t/d-1-a", backoff=0.01))
    assert got == ["event 1", "event 2", "end completed"]
    assert _DeltaStream.requests == [("", "0"), ("", "1")]


def test_async_deltas(served):
    async def main():
        return [ev async for ev in AsyncClient(served).events("t/d-1-a", backoff=0.01, deltas=True)]

    assert _log(asyncio.run(main()))[:3] == ["event 1", "delta 1/0 0 Hé", "delta 1/0 3 llo"]


def _read(items):
    """The text (by turn) and tool call arguments (by call id) a stream's
    deltas make, each checked to come once and in order; the committed
    texts and arguments of its cognition_out events; its end."""
    text, args, committed, calls, seqs, end = {}, {}, {}, {}, [], None
    for ev in items:
        if ev.kind == "end":
            end = ev.data
            break
        if ev.kind == "delta":
            d = ev.data
            assert isinstance(d, models.Delta) and ev.seq is None
            have, key = (args, d.call_id) if d.call_id else (text, d.turn)
            if d.call_id:
                assert d.tool == "rye/file-system/fs_write"
            assert d.offset == len(have.get(key, "").encode()), "each byte once, in order"
            have[key] = have.get(key, "") + d.text
            continue
        assert isinstance(ev.data, models.Event)
        assert ev.data.event_type != "token_delta", "with deltas on, the text comes as deltas"
        seqs.append(ev.seq)
        if ev.data.event_type == "cognition_out":
            committed[ev.data.payload["turn"]] = ev.data.payload["content"]
            for c in ev.data.payload.get("tool_calls") or []:
                calls[c["id"]] = c["input"]
    assert end is not None and end.status == "completed"
    assert seqs == sorted(set(seqs)), "each durable event once, in seq order"
    assert end.last_event_id >= seqs[-1]
    return text, args, committed, calls


def _check(text, args, committed, calls):
    assert committed[2].startswith("second: "), committed
    assert text and 2 in text, "the turns' text came as deltas"
    for turn, t in text.items():
        assert t == committed[turn], f"turn {turn}: the deltas are its committed text"
    for call_id, a in args.items():
        assert json.loads(a) == calls[call_id], "a call's deltas are its committed arguments"


def _api():
    url = os.environ.get("SPOOL_API_URL")
    assert url, "SPOOL_API_URL names the spool api under test"
    return url


def test_event_stream_with_deltas():
    c = Client(_api(), token=os.environ.get("SPOOL_API_TOKEN"))
    rec = c.run("t/talk", model=TALK)
    _check(*_read(c.events(rec.thread_id, deltas=True)))


def test_async_event_stream_with_deltas():
    async def main():
        c = AsyncClient(_api(), token=os.environ.get("SPOOL_API_TOKEN"))
        rec = await c.run("t/talk", model=TALK)
        return [ev async for ev in c.events(rec.thread_id, deltas=True)]

    _check(*_read(asyncio.run(main())))
