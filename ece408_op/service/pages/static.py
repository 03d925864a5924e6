"""The pages' stylesheet, script and icon (``static/``, read once at start: Site.static),
served with a long cache time; their URLs carry a hash of the content (``Site.static_url``)."""
from fastapi import Request
from starlette.responses import PlainTextResponse, Response

from .errors import page_router
from .site import site_of

router = page_router()


@router.get("/static/{name}")
async def static_file(request: Request, name: str):
    found = site_of(request).static.get(name)
    if found is None:
        return PlainTextResponse("no such file", status_code=404)
    return Response(found[0], media_type=found[1], headers={"Cache-Control": "public, max-age=86400",
                                                             "X-Content-Type-Options": "nosniff"})
