"""The asyncio variant of Client, standard library only.

    from spool_client import AsyncClient
    c = AsyncClient("http://127.0.0.1:8081", token="...")
    runs = await asyncio.gather(*(c.run("demo/hello", {"name": n}) for n in names))
    async for ev in c.events(runs[0].thread_id):
        ...
    done = await c.wait(runs[0].thread_id)

AsyncClient has every method of Client as a coroutine, with the same
arguments, results and errors, and events() as an async iterator with the
same resume guarantees (each durable event once, in seq order, resumed
after a dropped connection by Last-Event-ID) and, with deltas=True, the
same "delta" items. Each request runs in a
worker thread (asyncio.to_thread): the event loop is never blocked by the
network, and no HTTP library outside the standard library is needed.
"""

import asyncio
import functools
from typing import Any, AsyncIterator

from .client import Client, Event

# The methods of Client that AsyncClient has as coroutines.
_METHODS = ("run", "show", "list", "wait", "cancel", "pause", "unpause", "resume", "send", "approvals", "approve", "deny",
            "budget", "run_graph", "show_graph", "cancel_graph", "pause_graph", "unpause_graph", "send_graph_message")


class AsyncClient:
    """Talks to `spool api` as Client does (the same constructor), from
    asyncio code."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.sync = Client(*args, **kwargs)

    async def events(self, thread_id: str, after: int = 0, retries: int = 10,
                     backoff: float = 0.5, deltas: bool = False) -> AsyncIterator[Event]:
        """Client.events as an async iterator (deltas=True: with the
        model's words as they are written, as "delta" items)."""
        it = self.sync.events(thread_id, after, retries, backoff, deltas)
        done = object()
        try:
            while True:
                ev = await asyncio.to_thread(next, it, done)
                if ev is done:
                    return
                yield ev
        finally:
            try:
                it.close()  # drops the connection
            except ValueError:
                pass  # still reading in its thread (the task was cancelled): it ends with the stream


def _coroutine(name: str):
    sync = getattr(Client, name)

    @functools.wraps(sync)
    async def method(self: AsyncClient, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(sync, self.sync, *args, **kwargs)

    return method


for _name in _METHODS:
    setattr(AsyncClient, _name, _coroutine(_name))
