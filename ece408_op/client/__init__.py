"""The class's client: what a student's or an instructor's laptop runs against the service, and
nothing else (httpx and the standard library; no MXNet, NumPy, grading/, team/ or the server).

    api.py          the team's: ``login``, ``submit`` to the service, ``jobs``, ``ranking``; the
                    connection (server, token, retries) the instructor's commands use too
    instructor.py   the instructor's: ``teams``, ``deadlines``, ``kinds``, workers' tokens
    roster.py       the class's roster CSV, as ``teams import`` reads it

What the client and the service must agree on (the limits of a submission, the files a run takes,
the walk of a team's folder, the shape of a token) is ``base/terms.py``; the upload's format
(packed here, checked there) is ``service/upload.py`` with its archive rules in ``base/archive.py``,
and a build folder's (``jobs download`` checks it before unpacking) ``service/buildfolder.py``.
"""
