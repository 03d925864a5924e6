"""The error page, and the routers of pages whose errors are that page: a refusal
(refused.Refused: 400, 403, 404, 413, 429) and a database fault (503) answer as a page whose header
shows who is logged in; a missing session sends the browser to the login form."""
from fastapi import APIRouter
from fastapi.routing import APIRoute
from starlette.responses import RedirectResponse

from ...base.terms import redact_tokens
from ..db import Unavailable
from ..http import DOWN_RETRY
from ..refused import Refused
from ..state import service_of
from .site import HEADERS, LoginNeeded, site_of


def error_page(request, status, message, retry_after=None):
    """The error page, its header for whoever the request's session showed (where it was looked
    up before the error: every page's dependency does)."""
    headers = {"Retry-After": str(int(retry_after))} if retry_after is not None else None
    return site_of(request).render("error.html", getattr(request.state, "viewer", None), status=status,
                                   headers=headers, status_code=status, message=redact_tokens(message))


class PageRoute(APIRoute):
    """A page's route: a refusal and a database fault answer as the error page, a missing
    session as the login form (an API route answers them as JSON: app.py). A page's GET answers
    HEAD too, as a browser's or a link checker's HEAD expects."""

    def __init__(self, path, endpoint, **kwargs):
        super().__init__(path, endpoint, **kwargs)
        if "GET" in self.methods:
            self.methods.add("HEAD")

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def page(request):
            try:
                return await handler(request)
            except LoginNeeded:
                return RedirectResponse("/login", status_code=303, headers=HEADERS)
            except Refused as exc:
                return error_page(request, exc.status, str(exc), exc.retry_after)
            except Unavailable as exc:
                service_of(request).down(exc)
                return error_page(request, 503, f"the service's database cannot be reached right now; try again "
                                                f"in {DOWN_RETRY} s", DOWN_RETRY)
        return page


def page_router():
    """A router of pages (their errors as pages; none of them in an API schema)."""
    return APIRouter(route_class=PageRoute, include_in_schema=False)
