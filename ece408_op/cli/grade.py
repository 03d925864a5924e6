"""``python -m ece408_op grade SUBMISSIONS_DIR --milestone final``: grade every team folder as one
Slurm job array (or ``--local``: a pool of local processes), then print the ranking."""
import os

from ..grading import grade
from ..grading.ranking import ranking_report
from ..grading.runner import MILESTONES
from ..grading.store import describe, open_store
from .errors import ArgumentParser, run
from .submit import add_run_options, check_repeats, check_size, limits_of


def command(argv):
    parser = ArgumentParser(prog="ece408_op grade",
                            description="Grade a class: one sub-folder per team (its rai_build.yml and code), "
                                        "each graded by `submit --submit MILESTONE` in its own Slurm array task "
                                        "(or a local process), records in one database, the ranking at the end.")
    parser.add_argument("submissions", nargs="?", help="folder with one sub-folder per team")
    parser.add_argument("--milestone", choices=MILESTONES, default="final", help="default final")
    parser.add_argument("--local", action="store_true", help="run the tasks here in a process pool, without Slurm")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                        help="with --local: tasks at once (default: the number of cores)")
    parser.add_argument("--time", default="00:30:00", metavar="[D-]HH:MM:SS",
                        help="time limit of each task (Slurm's --time; with --local, enforced here too)")
    parser.add_argument("--gres", default="gpu:1", help="Slurm --gres per task (default gpu:1; 'none' for none)")
    parser.add_argument("--partition", help="Slurm partition")
    parser.add_argument("--account", help="Slurm account")
    parser.add_argument("--cpus-per-task", type=int, default=1, metavar="N", help="Slurm --cpus-per-task (default 1)")
    parser.add_argument("--max-parallel", type=int, metavar="N", help="at most N tasks at once (--array=...%%N)")
    parser.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                        help="one more sbatch argument, e.g. --sbatch-arg=--qos=class (repeatable)")
    parser.add_argument("--python", help="interpreter the tasks run with (default: this one; same path on the nodes)")
    parser.add_argument("--workdir", help="tasks.json, job.sh and logs/ (default SUBMISSIONS_DIR/.grade/<time>); "
                                          "must be visible from the nodes")
    parser.add_argument("--force", action="store_true", help="grade every team, even those already graded")
    parser.add_argument("--retry-stopped", action="store_true",
                        help="grade again teams whose only records for this content are killed or error")
    parser.add_argument("--run-task", metavar="TASKS_JSON", help=argparse_hidden())
    parser.add_argument("--task-index", type=int, help=argparse_hidden())
    add_run_options(parser)
    args = parser.parse_args(argv)
    if args.run_task:
        return _run_task(args)
    if not args.submissions:
        parser.error("give SUBMISSIONS_DIR, the folder with one sub-folder per team")
    check_size(parser, args.size)
    check_repeats(parser, args.repeats)
    try:
        time_limit = grade.slurm_seconds(args.time)
    except ValueError:
        parser.error(f"--time {args.time!r}: use [days-]hours:minutes:seconds, e.g. 00:30:00")
    if not args.local and not grade.has_slurm():
        parser.error("sbatch/squeue not found: grading through Slurm needs Slurm's commands; use --local to grade here")
    grade.export_db(args.db)
    from ..grading.sandbox import clean_stale
    clean_stale(args.scratch)
    from dataclasses import asdict
    plan = grade.Plan(args.milestone, args.size, os.path.abspath(args.hidden_model) if args.hidden_model else None,
                      args.engine, args.image, args.timeout, asdict(limits_of(args)),
                      os.path.abspath(args.scratch) if args.scratch else None, repeats=args.repeats)
    with open_store() as store:
        skipped = grade.plan_tasks(store, args.submissions, plan, args.retry_stopped, args.force)
        if skipped:
            print(f"Skipped {len(skipped)} team(s) whose submission is already graded: {', '.join(skipped)}")
        if plan.tasks:
            workdir = grade.new_workdir(args.submissions, args.workdir)
            plan.save(workdir / grade.TASKS_FILE)
            print(f"Grading {len(plan.tasks)} team(s), {args.milestone} on {args.size} images; "
                  f"records in {describe(store.url)}")
            if args.local:
                grade.run_local(plan, workdir, store, args.jobs, time_limit, args.python)
            else:
                slurm = grade.SlurmOptions(args.partition, args.account,
                                           None if args.gres.lower() in ("", "none") else args.gres,
                                           args.time, args.cpus_per_task, args.max_parallel, args.sbatch_arg)
                grade.run_slurm(plan, workdir, store, slurm, args.python)
        print(ranking_report(store, args.milestone, args.size))
    return 0


def argparse_hidden():
    import argparse
    return argparse.SUPPRESS


def _run_task(args):
    index = args.task_index if args.task_index is not None else os.environ.get("SLURM_ARRAY_TASK_ID")
    if index is None:
        raise grade.GradeError("--run-task needs --task-index or $SLURM_ARRAY_TASK_ID")
    from ..grading.store import Delivery
    record = grade.run_task(args.run_task, int(index), Delivery())
    print(f"* Record {record.id} ({record.team}): {record.status}")
    return 0


def main(argv):
    return run(command, argv)
