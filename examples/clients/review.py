#!/usr/bin/env python3
"""Runs the demo/review graph through `spool api` with the Python client:
starts it, prints its events as they are written and the words of the
model of each of its children as it writes them, approves any tool call
that waits for a person, and prints the outputs.

In examples/, with `spool dev` running:

    spool api &
    python3 clients/review.py queues leases budgets

SPOOL_API_URL (default http://127.0.0.1:8081) and SPOOL_API_TOKEN say
where the API is.
"""

import os
import pathlib
import sys
import threading

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "clients" / "python"))

from spool_client import Client  # noqa: E402


def words(c, child, label):
    """Prints what child's model writes, piece by piece as it writes it
    (deltas), then each turn's text whole once it is durable."""
    for m in c.events(child, deltas=True):
        if m.kind == "end":
            return
        if m.kind == "delta":
            if not m.data.call_id:
                print(f"     {label} writes: {m.data.text!r}", flush=True)
        elif m.data.event_type == "cognition_out" and (m.data.payload or {}).get("content"):
            print(f"     {label} wrote: {m.data.payload['content']}", flush=True)


def watch(c, run_id, stop, followers):
    """Follows each child of the run as it starts."""
    seen = set()
    while not stop.is_set():
        for k in c.list(parent=run_id):
            if k.thread_id not in seen:
                seen.add(k.thread_id)
                label = (k.inputs or {}).get("topic", k.thread_id)
                t = threading.Thread(target=words, args=(c, k.thread_id, label), daemon=True)
                t.start()
                followers.append(t)
        stop.wait(0.2)


def main():
    c = Client(os.environ.get("SPOOL_API_URL", "http://127.0.0.1:8081"), token=os.environ.get("SPOOL_API_TOKEN"))
    topics = sys.argv[1:] or ["queues", "leases"]
    run = c.run_graph("demo/review", {"topics": topics})
    print("run", run.thread_id)
    stop, followers = threading.Event(), []
    watcher = threading.Thread(target=watch, args=(c, run.thread_id, stop, followers), daemon=True)
    watcher.start()
    for m in c.events(run.thread_id):
        if m.kind == "end":
            print("ended", m.data.status)
            break
        ev = m.data
        print(f"{m.seq:4} {ev.event_type}")
        if ev.event_type == "approval_requested":
            # A person's decision: here, yes to whatever waits.
            for p in c.approvals(thread_id=run.thread_id):
                print(f"     approving {p.tool} ({p.call_id})")
            c.approve(run.thread_id, by="review.py", reason="approved by the example")
    stop.set()
    watcher.join()
    for t in followers:
        t.join(timeout=10)
    done = c.wait(run.thread_id)
    print("status ", done.status)
    print("outputs", done.outputs)
    print(f"spend   ${done.cost.spend:.6f}")
    return 0 if done.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
