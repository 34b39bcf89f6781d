"""A Python client of Spool's HTTP API (`spool api`), standard library only.

    from spool_client import Client
    c = Client("http://127.0.0.1:8081", token="...")
    rec = c.run("demo/hello", {"name": "Ada"})
    for ev in c.events(rec.thread_id):
        print(ev.seq, ev.data.event_type if ev.kind == "event" else ev.data.status)
    print(c.wait(rec.thread_id).outputs)

AsyncClient (spool_client.aio) is the same for asyncio code.
"""

from . import models
from .aio import AsyncClient
from .client import TERMINAL, Client, Event, SpoolError

__all__ = ["AsyncClient", "Client", "Event", "SpoolError", "TERMINAL", "models"]
