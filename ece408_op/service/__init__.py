"""The class's submission service (the course's rai): teams submit from anywhere, jobs queue in
the database, GPU workers run them in their sandboxes, transcripts stream back live.

Three processes, one job each:

    server  (``serve``)   HTTP in front of the record store; the queue's state lives in the
                          database it serves (jobs, transcript chunks, tokens); never runs team code
    worker  (``worker``)  takes one job at a time per GPU over HTTP, runs it through the existing
                          ranked or development path in its sandbox, streams the transcript, posts
                          the record; holds no database credentials
    client  (``submit --server``, ``jobs``, ``ranking --server``, ``login``)  uploads, follows,
                          prints; needs no GPU, no MXNet, no sandbox

One module per job:

    runs.py     the only door into grading/ and team/ (a move of those modules touches this file)
    db.py       the service's tables (own migrations, own version table) in the store's database
    tokens.py   team, worker and instructor tokens: made, hashed, checked in constant time
    jobs.py     the queue: submit (limits, deadlines), fair claim, leases, transcript chunks, end
    upload.py   the upload format: packed by the client, checked before anything unpacks it
    archive.py  the upload's tar archive: read by a parser of its own, every entry checked, unpacked
    app.py      the HTTP application (FastAPI): routes, authentication, live streams (SSE)
    server.py   ``serve``: uvicorn, local workers, the lease reaper, a clean SIGTERM
    slurm.py    ``serve --slurm``: one sbatch per queued job, each a ``worker --once``
    worker.py   ``worker``: claim, unpack, run one job in a child process, stream, report
    calls.py    the worker's HTTP side: its calls (retried), a job's transcript and heartbeat
    jobrun.py   that child: one ranked or development run through grading's runner
    client.py   the HTTP client of every student and instructor command
    logs.py     log lines on stderr (one event a line, key=value)

The class's pages (issue 34), served by the same application:

    pages.py      the routes: ranking, a team's page, a job's page, the instructor's, login (templates/, static/)
    sessions.py   a login's session cookie (its secret hashed in the database, tied to the token)
    choices.py    the instructor's choices kept in the database: names shown or pseudonyms
    standings.py  the ranking as the pages show it (grading's rules), the CSV with the grade rule
    overview.py   what the instructor's page reads: queue, workers, teams and their limits
    plots.py      a team's Op Time as a matplotlib SVG (optional: no matplotlib, no plot)
    pagebench.py  the pages' render benchmark (python -m ece408_op.service.pagebench)
"""
