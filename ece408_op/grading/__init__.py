"""Submissions and grading, as the course's rai server did them; no MXNet here (the milestones
run as processes, in a sandbox).

    config.py      rai_build.yml: read defensively, schema check with one message per error
    names.py       team-chosen strings escaped for tables and records
    sandbox.py     every team command in a sandbox: bubblewrap, podman, docker, buildah; host by name
    scratch.py     a run's scratch folder (src, build, channel, art), left-overs of killed runners
    channel.py     the socket the measuring process reports on (never the printed text)
    runner.py      development runs of rai_build.yml; ranked runs (--submit): build, measure, record
    profilers.py   ncu and nsys in a development run's commands: run where the worker has them, else one line
    transcript.py  "* Running <command>" and the runner's lines; a model's figures
    record.py      a run's record: one row of the runs table, its insert, the errors of storing it
    spool.py       records waiting for their database: retries, the spool folder, delivery
    store.py       records in SQLite or PostgreSQL, one schema, migrated on first use
    ranking.py     the course's ranking: fastest valid total Op Time, one row per team
    grade.py       a whole class: its plan and tasks, a local process pool, progress, fall-backs
    slurm_array.py a whole class as one Slurm job array
"""
