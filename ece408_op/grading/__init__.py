"""Submissions and grading, as the course's rai server did them; no MXNet here (the milestones
run as subprocesses, in the image or on the host).

    config.py      rai_build.yml: schema check with one message per error
    transcript.py  "* Running <command>", and parsing Op Time / Correctness
    engine.py      where commands run: docker, podman, buildah, or the host
    runner.py      a build on a scratch copy; --submit: fixed commands, reference runs, a record
    store.py       records in SQLite or PostgreSQL, one schema, migrated on first use
    ranking.py     the course's ranking: fastest valid total Op Time, one row per team
    grade.py       a whole class: one Slurm job array (or a local process pool), progress, fall-backs
"""
