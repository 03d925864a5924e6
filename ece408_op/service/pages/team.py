"""A team's page (``/team``; the instructor: ``/team?name=T``): its jobs, newest first, each with
its record (Op Time per layer, Correctness, why not valid, its files: a short SHA-256 in a
<details> that holds the full one); and per board a plot of its Op Time over its runs against the
class's best and median on one device kind (the kind its grade counts where the team ran on it,
else that of its newest run) (``/team/plot.svg``, matplotlib on the server, kept until the board
changes). A team reads "your runs", the instructor "this team's runs", on the page and the plot."""
from fastapi import Depends, Request
from starlette.responses import RedirectResponse, Response

from .. import overview, plots, standings
from ..jobs import ENDED
from ..refused import Refused
from ..logs import log
from ..grading_door import valid
from ...base.names import printable
from ..state import service_of
from .errors import page_router
from .site import board_params, files_of, member, member_stream, site_of

TEAM_JOBS = 100                      # jobs listed on a team's page (newest)

router = page_router()


async def team_of(request, principal):
    """The team whose page this is: a team's own; the instructor's ?name=."""
    name = request.query_params.get("name")
    if principal.kind == "team":
        if name is not None and name != principal.name:
            raise Refused(404, "no such team page here (your own is at /team)")
        return principal.name
    if name is None:
        return None
    service = service_of(request)
    if not await service.run(overview.team_exists, service.db, name):
        raise Refused(404, f"no team named {printable(name)}")
    return name


def team_runs(db, team):
    """(the team's newest jobs, how many it has, {record id: its record}, its boards)."""
    found, total = overview.team_jobs(db, team, TEAM_JOBS)
    ids = [j["record_id"] for j in found if j["record_id"] and j["state"] in ENDED]
    records = {r.id: r for r in standings.light_records(db, ids=ids)}
    return found, total, records, standings.team_boards(db, team)


@router.get("/team")
async def team_page(request: Request, viewer=Depends(member)):
    service = service_of(request)
    team = await team_of(request, viewer.principal)
    if team is None:
        return RedirectResponse("/admin", status_code=303)
    found, total, records, mine = await service.run(team_runs, service.db, team)
    runs = []
    for j in found:
        record = records.get(j["record_id"])
        layers = standings.layers_of(record.models) if record else []
        runs.append({"job": j, "record": record, "layers": layers,
                     "timed": any(layer.times or layer.total is not None for layer in layers),
                     "files": files_of(record.team_files if record and record.team_files else j["files"])})
    query = {"name": team} if viewer.principal.kind == "instructor" else {}
    return site_of(request).render("team.html", viewer, team=team, runs=runs, total=total, boards=mine,
                                   plots=plots.available(), query=query, whose=whose(viewer.principal))


def whose(principal):
    """Whose runs a team page shows, as its viewer reads it: a team's own are "your" runs, to the
    instructor they are "this team's"."""
    return "your" if principal.kind == "team" else "this team's"


@router.get("/team/plot.svg")
async def team_plot(request: Request, viewer=Depends(member_stream)):
    service, site = service_of(request), site_of(request)
    team = await team_of(request, viewer.principal)
    if team is None:
        raise Refused(404, "name the team: ?name=")
    milestone, size = board_params(request.query_params, required=True)
    if not plots.available():
        raise Refused(404, "this server has no matplotlib: no plots (pip install matplotlib)")
    serial, st = await service.rankings.team_standing(milestone, size, team)
    key = (team, milestone, size, viewer.principal.kind)                 # the legend says whose runs
    cached = site.plots.get(key)
    if cached is None or cached[0] != serial:
        names = standings.record_teams(team)
        runs = [(r.created_at, r.op_time, valid(r)) for r in (st.chosen.records if st.chosen else [])
                if r.team in names]
        best, median = st.best_and_median()
        try:
            on = f" on {printable(st.device, 60)}".replace("$", r"\$") if st.device else ""    # no mathtext
            svg = await service.run(plots.op_time_svg, runs, best, median,
                                    f"{milestone}, {size} images{on}: total Op Time of each run",
                                    f"{whose(viewer.principal)} valid runs")
        except ImportError as exc:                       # a broken install: no plots from now on
            plots.missing()
            log("plots.unavailable", level="warning", reason=str(exc))
            raise Refused(404, "this server cannot import matplotlib: no plots") from None
        cached = (serial, svg)
        site.keep_plot(key, serial, svg)
    site.plots.move_to_end(key)
    return Response(cached[1], media_type="image/svg+xml", headers={
        "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'", "X-Content-Type-Options":
        "nosniff", "Cache-Control": "private, max-age=5"})
