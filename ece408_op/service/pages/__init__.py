"""The class's pages, rendered on the server from Jinja2 templates (``service/templates/``,
autoescaped) with one small stylesheet and one small script (``service/static/``), no build
step. One module a page, each with its routes on a router of pages (errors.py):

    GET  /                       the ranking of a milestone and size (?milestone=&size=), a tab a device  ranking.py
                                 kind (&device=), live (SSE)
    GET  /ranking/events         its live part: the ranking's HTML, sent again when it changes
                                 (?milestone=&size=&device=; without them the newest board)
    GET  /team                   a team's runs and plots (the instructor: ?name=TEAM)                    team.py
    GET  /team/plot.svg          its Op Time over its runs against the class's best and median (matplotlib)
    GET  /jobs/{id}              a job: its place in the queue, its transcript live, its verdict         job.py
    GET  /jobs/{id}/events       its live part (the transcript's lines as text, the place, the verdict)
    GET  /jobs/{id}/transcript   the transcript as plain text
    GET  /jobs/{id}/build        a development run's build folder (tar.gz) while it is kept
    POST /jobs/{id}/cancel
    GET  /admin                  the instructor: queue, workers, teams, deadlines, kinds, names, CSV     admin.py
    POST /admin/names            whether teams see the other teams' names or pseudonyms
    POST /admin/grading-kind     the device kind whose runs count for a milestone's grade (or none)
    POST /admin/unknown-gpus     whether a team may ask for a GPU kind no worker has reported
    POST /admin/unserved-jobs    whether a job no worker seen lately can take is refused or queued
    POST /admin/deadlines        set or clear a milestone's deadline
    POST /admin/teams/revoke     revoke a team's token (its sessions end with it)
    POST /admin/jobs/{id}/cancel
    GET  /admin/ranking.csv      one device kind's ranking as CSV, optionally with the course's grade rule
    GET  /login                  the login form                                                          login.py
    POST /login                  a token, given once, opens a session (sessions.py)
    POST /logout                 ends it

Beside them: ``site.py`` (templates, static files, the session as a dependency: ``member``,
``member_stream``, ``instructor``; forms and their CSRF field), ``errors.py`` (the error page and
``page_router``), ``static.py`` (``/static/{name}``). Every query a page runs is a function of the
service's query modules (standings.py, overview.py, jobs.py, sessions.py) or of rankings.py's caches.

Every page needs a session (a team's or the instructor's); a team sees its own page and jobs
only (another team's answers 404, as the API does). Nothing a team wrote reaches a page as markup:
templates escape every value, transcripts have their control characters written as escapes
(``as_text``: an ANSI colour shows as ``\\x1b[31m``), live parts set text, and the pages' Content
Security Policy allows scripts from this server only. Pages work without JavaScript; the script
only makes the ranking and a job's transcript live (EventSource).
"""
from . import admin, job, login, ranking, static, team
from .site import Site

ROUTERS = (ranking.router, team.router, job.router, admin.router, login.router, static.router)


def add_pages(app):
    """The pages' routes and their Site (``app.state.site``) on ``app``."""
    app.state.site = Site()
    for router in ROUTERS:
        app.include_router(router)
