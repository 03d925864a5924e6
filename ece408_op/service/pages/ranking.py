"""The ranking's page (``/``): one board (a milestone and size) as ``ranking`` ranks it, each
team named for the viewer; and its live part (``/ranking/events``), the table's HTML sent again
whenever the ranking changes."""
import asyncio
import json
import time

from fastapi import Depends, Request
from sse_starlette import EventSourceResponse
from starlette.background import BackgroundTask

from .. import limits, sessions, standings
from ..db import Unavailable
from ..http import DOWN_RETRY, address
from ..state import service_of
from .errors import page_router
from .site import board_params, member, member_stream, site_of

STREAM_CHECK = 60.0                  # seconds between checks that a live page's session still counts

router = page_router()


async def ranking_view(service, principal, milestone, size):
    """What ranking.html and ranking_table.html show of a board (the newest where none is named)."""
    rankings = service.rankings
    found = await rankings.boards()
    if milestone is None and found:
        milestone, size = found[0][0], found[0][1]
    serial, st = (None, None)
    rows = []
    if milestone is not None:
        serial, st = await rankings.standing(milestone, size)
        rows = standings.named(st.rows, principal.name if principal.kind == "team" else None,
                               await rankings.pseudonyms(st, principal), await rankings.class_names())
    models = list(dict.fromkeys(layer.model for r in rows for layer in r.layers))
    for r in rows:
        by_model = {layer.model: layer for layer in r.layers}
        r.cells = [by_model.get(m) for m in models]
    anonymised = await rankings.anonymised_for(principal)
    return {"boards": found, "milestone": milestone, "size": size, "st": st, "rows": rows, "models": models,
            "anonymised": anonymised,
            "fingerprint": (serial, tuple((m, s) for m, s, _ in found), anonymised)}


@router.get("/")
async def ranking_page(request: Request, viewer=Depends(member)):
    milestone, size = board_params(request.query_params)
    view = await ranking_view(service_of(request), viewer.principal, milestone, size)
    return site_of(request).render("ranking.html", viewer, **view)


@router.get("/ranking/events")
async def ranking_events(request: Request, viewer=Depends(member_stream)):
    service, site = service_of(request), site_of(request)
    milestone, size = board_params(request.query_params)           # none: the newest board, once there is one

    async def stream():
        sent, checked = None, time.monotonic()
        while True:
            try:
                view = await ranking_view(service, viewer.principal, milestone, size)
                if view["fingerprint"] != sent:
                    yield {"event": "ranking", "data": json.dumps(site.fragment("ranking_table.html", **view))}
                    sent = view["fingerprint"]
                if time.monotonic() - checked > STREAM_CHECK:
                    checked = time.monotonic()
                    if await service.run(sessions.find, service.db, viewer.value) != viewer.principal:
                        yield {"event": "gone", "data": json.dumps("the session ended; log in again")}
                        return
            except Unavailable as exc:
                service.down(exc)
                await asyncio.sleep(DOWN_RETRY)
                continue
            await asyncio.sleep(1.0)
    ticket = service.streams.open(viewer.principal, address(request), viewer.value)
    return EventSourceResponse(limits.stream(service.streams, ticket, stream()), ping=15, send_timeout=30,
                               headers={"Cache-Control": "no-store"},
                               background=BackgroundTask(service.streams.close, ticket))
