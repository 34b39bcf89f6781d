#!/usr/bin/env python3
"""Runs the demo/review graph through `spool api` with the Python client:
starts it, prints its events as they are written, approves any tool call
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "clients" / "python"))

from spool_client import Client  # noqa: E402


def main():
    c = Client(os.environ.get("SPOOL_API_URL", "http://127.0.0.1:8081"), token=os.environ.get("SPOOL_API_TOKEN"))
    topics = sys.argv[1:] or ["queues", "leases"]
    run = c.run_graph("demo/review", {"topics": topics})
    print("run", run.thread_id)
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
    done = c.wait(run.thread_id)
    print("status ", done.status)
    print("outputs", done.outputs)
    print(f"spend   ${done.cost.spend:.6f}")
    return 0 if done.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
