"""The ranking's page (``/``): one board (a milestone and size) as ``ranking`` ranks it, one
device kind's table at a time (a tab a kind, ``?device=``; by default the kind chosen for the
milestone's grade, else the first), each team named for the viewer; and its live part
(``/ranking/events``), the table's HTML sent again whenever the ranking changes, of the same
board and kind."""
import asyncio
import json
import time
from urllib.parse import urlencode

from fastapi import Depends, Request
from sse_starlette import EventSourceResponse
from starlette.background import BackgroundTask

from .. import limits, sessions, standings
from ..db import Unavailable
from ..http import DOWN_RETRY, address, kind_param
from ..refused import Refused
from ..grading_door import KindError, resolve_kind
from ..state import service_of
from .errors import page_router
from .site import board_params, member, member_stream, site_of

STREAM_CHECK = 60.0                  # seconds between checks that a live page's session still counts

router = page_router()


async def ranking_view(service, principal, milestone, size, device=None):
    """What ranking.html and ranking_table.html show of a board (the newest where none is named)
    and of one of its tables (that of the kind ``device`` names; Refused 404 where it names none
    of the board's kinds)."""
    rankings = service.rankings
    found = await rankings.boards()
    if milestone is None and found:
        milestone, size = found[0][0], found[0][1]
    serial, board, st, rows = None, None, None, []
    if milestone is not None:
        serial, board = await rankings.board(milestone, size)
        if device is not None:
            try:
                kind = resolve_kind(device, board.kinds, "device", f"device kind of {milestone} on {size} images")
            except KindError as exc:
                raise Refused(404, str(exc)) from None
        else:
            kind = (await rankings.grading_kinds()).get(milestone)
        st = standings.table_of(board, kind)
        rows = standings.named(st.rows, principal.name if principal.kind == "team" else None,
                               await rankings.pseudonyms(board, principal), await rankings.class_names())
    models = list(dict.fromkeys(layer.model for r in rows for layer in r.layers))
    for r in rows:
        by_model = {layer.model: layer for layer in r.layers}
        r.cells = [by_model.get(m) for m in models]
    anonymised = await rankings.anonymised_for(principal)
    query = {"milestone": milestone, "size": size, **({"device": device} if device else {})} if milestone else {}
    return {"boards": found, "milestone": milestone, "size": size, "board": board, "st": st, "rows": rows,
            "models": models, "anonymised": anonymised,
            "live": "/ranking/events" + (f"?{urlencode(query)}" if query else ""),
            "fingerprint": (serial, tuple((m, s) for m, s, _ in found), anonymised, st.device if st else None)}


@router.get("/")
async def ranking_page(request: Request, viewer=Depends(member)):
    milestone, size = board_params(request.query_params)
    device = kind_param(request.query_params, "device") if milestone is not None else None
    view = await ranking_view(service_of(request), viewer.principal, milestone, size, device)
    return site_of(request).render("ranking.html", viewer, **view)


@router.get("/ranking/events")
async def ranking_events(request: Request, viewer=Depends(member_stream)):
    service, site = service_of(request), site_of(request)
    milestone, size = board_params(request.query_params)           # none: the newest board, once there is one
    device = kind_param(request.query_params, "device") if milestone is not None else None
    ticket = service.streams.open(viewer.principal, address(request), viewer.value)   # the caps first
    try:
        await ranking_view(service, viewer.principal, milestone, size, device)    # a kind named: one of the board's
    except BaseException:
        service.streams.close(ticket)
        raise

    async def stream():
        sent, checked = None, time.monotonic()
        while True:
            try:
                view = await ranking_view(service, viewer.principal, milestone, size, device)
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
    return EventSourceResponse(limits.stream(service.streams, ticket, stream()), ping=15, send_timeout=30,
                               headers={"Cache-Control": "no-store"},
                               background=BackgroundTask(service.streams.close, ticket))
