"""The Python client against a real `spool api`, Redis and worker.

Run by the Go test e2e.TestPythonClient, which starts them with the test
project (t/greet, t/slow, t/gated, the g/review graph) and sets
SPOOL_API_URL and SPOOL_TEST_MODEL. Without SPOOL_API_URL every test fails:
these tests never pass by skipping.
"""

import os
import pathlib
import subprocess
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from spool_client import Client, SpoolError, models  # noqa: E402

MODEL = os.environ.get("SPOOL_TEST_MODEL", "script:scripts/api.yaml")


@pytest.fixture(scope="module")
def client():
    url = os.environ.get("SPOOL_API_URL")
    assert url, "SPOOL_API_URL names the spool api under test"
    return Client(url, token=os.environ.get("SPOOL_API_TOKEN"))


def until(what, fn, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_models_current():
    gen = pathlib.Path(__file__).resolve().parent.parent / "gen_models.py"
    r = subprocess.run([sys.executable, str(gen), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_run_and_wait(client):
    rec = client.run("t/greet", {"name": "py"}, model=MODEL)
    assert isinstance(rec, models.Record)
    assert rec.directive == "t/greet" and rec.status in ("created", "running")
    done = client.wait(rec.thread_id, timeout=60)
    assert done.status == "completed", done.error
    assert done.result == "done for py"
    assert done.cost.turns == 2 and done.cost.spend > 0
    assert client.show(rec.thread_id).thread_id == rec.thread_id
    assert any(r.thread_id == rec.thread_id for r in client.list(directive="t/greet"))
    b = client.budget(rec.thread_id)
    assert b.actual == pytest.approx(done.cost.spend)


def test_bad_input_is_a_problem(client):
    with pytest.raises(SpoolError) as e:
        client.show("t/no-such-thread-1")
    assert e.value.status == 404 and e.value.code == "not_found"
    with pytest.raises(SpoolError) as e:
        client.run("t/greet", {"name": "x"}, limits={"turns": -1})
    assert e.value.status == 400 and e.value.code


def test_cancel(client):
    rec = client.run("t/slow", model=MODEL)
    until("t/slow running", lambda: client.show(rec.thread_id).status == "running")
    res = client.cancel(rec.thread_id)
    assert res.success and res.thread_id == rec.thread_id
    assert client.wait(rec.thread_id, timeout=60).status == "cancelled"


def test_pause_and_unpause(client):
    # A thread waiting for a decision is paused at once; unpaused, it waits
    # for the decision again.
    rec = client.run("t/gated", model=MODEL)
    until("t/gated waiting for approval",
          lambda: (lambda r: r.status == "waiting" and r.waiting_for == "approval")(client.show(rec.thread_id)))
    res = client.pause(rec.thread_id)
    assert isinstance(res, models.PauseResult)
    assert res.success and res.thread_id == rec.thread_id
    assert res.status == "paused" and res.pause_requested and res.runs == 1 and res.paused == 1
    shown = client.show(rec.thread_id)
    assert shown.status == "paused" and shown.pause_requested
    assert any(r.thread_id == rec.thread_id for r in client.list(status="paused"))
    assert client.pause(rec.thread_id).status == "paused", "pausing a paused thread changes nothing"
    res = client.unpause(rec.thread_id)
    assert res.status == "waiting" and not res.pause_requested and res.runs == 1
    shown = client.show(rec.thread_id)
    assert shown.status == "waiting" and shown.waiting_for == "approval" and not shown.pause_requested
    client.approve(rec.thread_id, by="pytest")
    assert client.wait(rec.thread_id, timeout=60).status == "completed"
    with pytest.raises(SpoolError) as e:
        client.pause(rec.thread_id)
    assert e.value.status == 409 and e.value.code == "run_ended"
    with pytest.raises(SpoolError) as e:
        client.unpause(rec.thread_id, tree=True)
    assert e.value.status == 409 and e.value.code == "run_ended"

    # A running thread pauses at its next turn, and goes on when unpaused.
    rec = client.run("t/slow", model=MODEL)
    until("t/slow running", lambda: client.show(rec.thread_id).status == "running")
    res = client.pause(rec.thread_id, tree=True)
    assert res.pause_requested and res.status in ("running", "paused")
    until("t/slow paused", lambda: client.show(rec.thread_id).status == "paused")
    turns = client.show(rec.thread_id).cost.turns
    time.sleep(0.5)
    assert client.show(rec.thread_id).cost.turns == turns, "no turn while paused"
    assert not client.unpause(rec.thread_id).pause_requested
    done = client.wait(rec.thread_id, timeout=60)
    assert done.status == "completed" and done.result == "slow done"
    assert done.paused_ms and done.paused_ms >= 500


def test_pause_a_graph_run(client):
    # Paused while it waits for a message; the message that comes meanwhile
    # is taken once it is unpaused.
    run = client.run_graph("g/inbox", {})
    until("the run waiting for its first message",
          lambda: client.show_graph(run.thread_id).waiting_for == "message", timeout=90)
    res = client.pause_graph(run.thread_id)
    assert res.thread_id == run.thread_id and res.status == "paused" and res.paused == 1
    assert client.show_graph(run.thread_id).status == "paused"
    client.send_graph_message(run.thread_id, "item", {"n": 1})
    time.sleep(0.5)
    g = client.show_graph(run.thread_id)
    assert g.status == "paused" and g.step == 0, "a paused run takes no step"
    assert client.unpause_graph(run.thread_id).status in ("waiting", "running")
    until("the run waiting at its second node",
          lambda: (lambda g: g.step == 1 and g.waiting_for == "message")(client.show_graph(run.thread_id)), timeout=90)
    client.send_graph_message(run.thread_id, "item", {"n": 2})
    done = client.wait(run.thread_id, timeout=90)
    assert done.status == "completed", done.error
    assert done.outputs["a"] == 1 and done.outputs["b"] == 2
    # The graph routes refuse a thread's id.
    rec = client.run("t/greet", {"name": "g"}, model=MODEL)
    with pytest.raises(SpoolError) as e:
        client.pause_graph(rec.thread_id)
    assert e.value.status == 404 and e.value.code == "not_graph"
    client.wait(rec.thread_id, timeout=60)


def test_approve(client):
    rec = client.run("t/gated", model=MODEL)
    pending = until("an approval", lambda: client.approvals(thread_id=rec.thread_id))
    assert pending[0].tool == "rye/file-system/fs_list"
    res = client.approve(rec.thread_id, reason="looks fine", by="pytest")
    assert res.decision == "approve" and res.woken
    done = client.wait(rec.thread_id, timeout=60)
    assert done.status == "completed", done.error


def test_event_stream_cut_and_resumed(client):
    rec = client.run("t/slow", model=MODEL)
    seen = []
    for ev in client.events(rec.thread_id):
        assert ev.kind == "event"
        seen.append(ev.seq)
        if len(seen) == 3:
            break  # the connection is dropped mid-thread
    end = None
    for ev in client.events(rec.thread_id, after=seen[-1]):
        if ev.kind == "end":
            end = ev.data
            break
        assert isinstance(ev.data, models.Event)
        seen.append(ev.seq)
    assert end is not None and end.status == "completed"
    assert seen == list(range(1, len(seen) + 1)), "every durable event once, in order"
    assert end.last_event_id == seen[-1]


def test_graph_run_with_approval(client):
    run = client.run_graph("g/review", {"topics": ["queues", "leases"], "sign_off": True})
    pending = until("the sign_off approval", lambda: client.approvals(thread_id=run.thread_id), timeout=90)
    assert pending
    client.approve(run.thread_id, by="pytest")
    done = client.wait(run.thread_id, timeout=90)
    assert done.status == "completed", done.error
    g = client.show_graph(run.thread_id)
    assert isinstance(g, models.GraphRun)
    assert g.outputs["reviewed"] == 2
    assert [n.node for n in g.nodes if n.status == "completed"][:2] == ["plan", "review"]


def test_graph_run_with_a_message(client):
    run = client.run_graph("g/inbox", {})
    sent = client.send_graph_message(run.thread_id, "item", {"n": 1}, id="first")
    assert sent.run_id == run.thread_id and not sent.duplicate
    assert client.send_graph_message(run.thread_id, "item", {"n": 9}, id="first").duplicate
    with pytest.raises(SpoolError) as bad:
        client.send_graph_message(run.thread_id, "item", {"n": "one"})
    assert bad.value.status == 422 and bad.value.code == "message_invalid"
    until("the run waiting at its second node",
          lambda: client.show_graph(run.thread_id).waiting_for == "message", timeout=90)
    assert client.show_graph(run.thread_id).message_name == "item"
    assert client.send_graph_message(run.thread_id, "item", {"n": 2}).woken
    done = client.wait(run.thread_id, timeout=90)
    assert done.status == "completed", done.error
    assert done.outputs == {"a": 1, "b": 2, "a_id": "first"}
    with pytest.raises(SpoolError) as ended:
        client.send_graph_message(run.thread_id, "item", {"n": 3})
    assert ended.value.status == 409 and ended.value.code == "run_ended"
