"""The class's submission service (the course's rai): teams submit from anywhere, jobs queue in
the database, GPU workers run them in their sandboxes, transcripts stream back live.

Three processes, one job each:

    server  (``serve``)   HTTP in front of the record store; the queue's state lives in the
                          database it serves (jobs, transcript chunks, tokens); never runs team code
    worker  (``worker``)  takes one job at a time per GPU over HTTP, runs it through the existing
                          ranked or development path in its sandbox, streams the transcript, posts
                          the record; holds no database credentials
    client  (``submit``, ``jobs``, ``ranking``, ``login``: ``ece408_op/client/``)  uploads, follows,
                          prints; needs no GPU, no MXNet, no sandbox

One module per job:

    grading_door.py  the only door into grading/ and team/ (a move of those modules touches this file)
    db.py        the service's tables (own migrations, own version table) in the store's database
    tokens.py    team, worker and instructor tokens: made, hashed, checked in constant time
    identity.py  a team name as an identity: its form (PRECIS usernames, one script) and look (UTS #39)
    jobs.py      the queue: submit (limits, deadlines), fair claim, leases, transcript chunks, end
    clock.py     the service's clock: the wall clock read at start, moved by the monotonic clock
                 (leases, time limits, per-hour windows: a step of the system clock changes none)
    capacity.py  at submission, whether a worker seen lately can take the job; refused in one line
                 saying what to change (or queued with that line as a warning)
    upload.py    the upload format: packed by the client, checked before anything unpacks it (its tar
                 archive: base/archive.py, shared with the client)
    uploadstore.py  the server's uploads: the bytes in flight bounded (503 before the body), each
                 body written to a file as it comes, kept content-addressed (not in the database)
                 within the upload quotas, let go when its job ends (ranked: after ``--keep-ranked-uploads``);
                 all bodies together received at ``--upload-rate`` at most
    checker.py   the uploads' checks in processes of their own (niced, killed with the server), so that
                 the event loop never waits for an archive being unpacked
    buildfolder.py  a development run's /build as the service keeps it: packed by the worker (bounded),
                 checked by the server and by ``jobs download``, unpacked (all or nothing)
    buildstore.py   the server's build folders: received under the job's lease, kept on disk for
                 ``--keep-builds`` days within a team's quota and the service's total,
                 served to its team, deleted
    server.py    ``serve``: uvicorn, local workers, the lease reaper, a clean SIGTERM
    slurm.py     ``serve --slurm``: one sbatch per queued job, each a ``worker --once``
    worker.py    ``worker``: claim, unpack, run one job in a child process, stream, report
    calls.py     the worker's HTTP side: its calls (retried), a job's transcript and heartbeat
    jobrun.py    that child: one ranked or development run through grading's runner
    logs.py      log lines on stderr (one event a line, key=value)
    paths.py     where the service keeps its files (database, state folder, tokens)
    errors.py    ServeError: what stops ``serve`` from starting, in one line

The HTTP application (FastAPI), assembled by ``app.py`` (its start and stop, the lease reaper,
errors as one-line JSON, the routers):

    state.py     what every route shares: Settings, the Service (``request.app.state.service``)
    auth.py      who is asking: a token checked by a dependency, ``Depends(team_or_instructor)``...
    http.py      the routes' helpers: JSON errors, bounded bodies, checked parameters, the access log
    live.py      the Hub of in-process wake-ups and ``follow``, a job's live events (SSE)
    progress.py  a running job's step as its worker reports it (checked, bounded text) and the
                 ``progress`` and ``end`` events
    rankings.py  the ranking as this server keeps it between records (the API's and the pages')
    api/         the API, a router per area: health.py (health, readiness, whoami), jobs.py (a
                 team's jobs), ranking.py (the ranking, deadlines), instructor.py (teams, tokens,
                 deadlines), worker.py (claim, upload, chunks, heartbeat, release, finish)

The clients (``ece408_op/client/``: httpx only) share the upload's format (upload.py) and nothing else.

The class's pages, served by the same application:

    pages/        one module a page, each a router: ranking.py, team.py, job.py, admin.py,
                  login.py (and logout); errors.py (the error page, the pages' router class),
                  site.py (templates/, static/, the session as a dependency, forms), static.py
    sessions.py   a login's session cookie (its secret hashed in the database, tied to the token)
    choices.py    the instructor's choices kept in the database: names shown or pseudonyms
    standings.py  the ranking as the pages show it (grading's rules), the CSV with the grade rule
    overview.py   what the instructor's page reads: queue, workers, teams and their limits
    filters.py    how the templates write values: transcripts as text, times, a queued job's place
    plots.py      a team's Op Time as a matplotlib SVG (optional: no matplotlib, no plot)
    pagebench.py  the pages' render benchmark (python -m ece408_op.service.pagebench)
"""
