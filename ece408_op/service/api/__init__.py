"""The HTTP API, one router per area; every route declares the tokens it takes as a dependency
(``auth.py``) and reaches the shared state through ``service_of(request)`` (state.py).

    GET  /health                              the process answers (liveness)                  health.py
    GET  /ready                               the database answers (readiness); 503 otherwise
    GET  /api/whoami                          any token: its kind and name
    POST /api/jobs?kind=ranked&milestone=m2&size=100   team: queue an upload (body: the tar.gz)    jobs.py
                                              (&gpu=KIND: the device kind it runs on; not with m2)
    GET  /api/jobs[?team=T]                   team: its own jobs; instructor: all (or one team's)
    GET  /api/jobs/{id}                       team: its own (another team's id: 404); instructor: any
    GET  /api/jobs/{id}/transcript            the transcript so far, as text
    GET  /api/jobs/{id}/events?after=SEQ      server-sent events: queued (place), line, notice, end
    GET  /api/jobs/{id}/build                 a development run's build folder (tar.gz) while it is kept
    POST /api/jobs/{id}/cancel
    GET  /api/ranking?milestone=&size=&device=&format=table|csv|json   team or instructor: a table  ranking.py
                                              per device kind (device=: one); a team: pseudonyms for the other
                                              teams where the instructor chose them on /admin
    GET  /api/deadlines
    GET  /api/kinds                           the device kinds (workers', runs'), the grading kinds, unknown_gpus
    POST /api/admin/teams {names, skip_existing}     instructor: tokens shown once                instructor.py
    POST /api/admin/teams/import/check {names, lines}          a roster's names as stored, which exist (imports.py)
    POST /api/admin/teams/import {names, lines, tokens}        its new teams, the client's tokens: all or nothing
    GET  /api/admin/teams, POST /api/admin/teams/revoke {name}, POST /api/admin/teams/rotate {name}
    GET  /api/admin/uncounted                        instructor: records kept as not counted (late, cancelled)
    POST /api/admin/workers {name}                   instructor: a worker token
    PUT  /api/admin/deadlines {milestone, deadline}  instructor (ISO 8601 with its zone; null clears)
    PUT  /api/admin/settings {grading_kinds: {milestone: kind|null}, unknown_gpus: refused|accepted}
    POST /api/worker/claim {slot, gpu, device, wait} worker: the next job and its lease, or 204      worker.py
    GET  /api/worker/jobs/{id}/upload                worker (X-Lease): the job's upload
    POST /api/worker/jobs/{id}/chunks {chunks}       worker: transcript chunks [[seq, text]]
    POST /api/worker/jobs/{id}/heartbeat, /finish {status, exit_code, reason, record}, /release
    POST /api/worker/jobs/{id}/build                 worker: a development run's build folder (tar.gz)

Tokens travel only in ``Authorization: Bearer``; an error is JSON ``{"error": "one line"}``
(``Retry-After`` where waiting helps: 429, and 503 while the database is down).

The schema of all of it is served at ``/openapi.json`` (no token needed; ``openapi.py``): each
route's answer is its ``response_model`` (``models.py``), checked by FastAPI as it goes out; its
body, parameters and headers are declared there for the schema but read and checked by the route
(bounded bodies, the service's 400 lines). A new route declares its answer's model and its refusals
(``models.refusals``) like the others; tests/service/test_api_schema.py fuzzes every one.
"""
from . import health, instructor, jobs, ranking, worker

ROUTERS = (health.router, jobs.router, ranking.router, instructor.router, worker.router)
