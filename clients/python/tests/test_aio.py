"""AsyncClient against the same real `spool api` as test_client.py."""

import asyncio
import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from spool_client import AsyncClient, Client, SpoolError, models  # noqa: E402
from spool_client.aio import _METHODS  # noqa: E402

MODEL = os.environ.get("SPOOL_TEST_MODEL", "script:scripts/api.yaml")


def aclient():
    url = os.environ.get("SPOOL_API_URL")
    assert url, "SPOOL_API_URL names the spool api under test"
    return AsyncClient(url, token=os.environ.get("SPOOL_API_TOKEN"))


def test_every_method_is_a_coroutine():
    public = {n for n in dir(Client) if not n.startswith("_") and callable(getattr(Client, n))}
    assert public == set(_METHODS) | {"events"}, "a method of Client that AsyncClient lacks"
    for n in _METHODS:
        assert asyncio.iscoroutinefunction(getattr(AsyncClient, n)), n


def test_runs_at_once_and_waits():
    async def main():
        c = aclient()
        recs = await asyncio.gather(*(c.run("t/greet", {"name": f"aio{i}"}, model=MODEL) for i in range(3)))
        assert all(isinstance(r, models.Record) for r in recs)
        done = await asyncio.gather(*(c.wait(r.thread_id, timeout=60) for r in recs))
        assert [d.result for d in done] == ["done for aio0", "done for aio1", "done for aio2"]
        with pytest.raises(SpoolError) as e:
            await c.show("t/no-such-thread-1")
        assert e.value.status == 404 and e.value.code == "not_found"

    asyncio.run(main())


def test_event_stream_cut_and_resumed():
    async def main():
        c = aclient()
        rec = await c.run("t/slow", model=MODEL)
        seen = []
        async for ev in c.events(rec.thread_id):
            seen.append(ev.seq)
            if len(seen) == 2:
                break  # the connection is dropped mid-thread
        end = None
        async for ev in c.events(rec.thread_id, after=seen[-1]):
            if ev.kind == "end":
                end = ev.data
                break
            seen.append(ev.seq)
        assert end is not None and end.status == "completed"
        assert seen == list(range(1, len(seen) + 1)), "every durable event once, in order"

    asyncio.run(main())
