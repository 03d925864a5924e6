"""``python -m ece408_op grade SUBMISSIONS_DIR --milestone final``: grade every team folder as one
Slurm job array (or ``--local``: a pool of local processes), then print the ranking."""
import os
from dataclasses import asdict

from ..grading import grade, slurm_array
from ..base.names import printable, shown
from ..grading.ranking import ranking_report
from ..course import GPU_RANKED as GPU_MILESTONES, RANKED as MILESTONES
from ..grading.machine import check_device
from ..grading.request import SubmitError
from ..grading.store import describe, open_store
from .errors import ArgumentParser, run
from .submit import add_run_options, check_repeats, limits_of
from .teamargs import check_size


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
    parser.add_argument("--share-nodes", action="store_true",
                        help="m2 through Slurm: let tasks share a node (default: --exclusive, one m2 task per node, "
                             "so that no CPU timing shares cores with another team)")
    parser.add_argument("--force", action="store_true", help="grade every team, even those already graded")
    parser.add_argument("--retry-stopped", action="store_true",
                        help="grade again teams whose only records for this content and these options are killed "
                             "(error records are always graded again)")
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
        time_limit = slurm_array.slurm_seconds(args.time)
    except ValueError:
        parser.error(f"--time {args.time!r}: use [days-]hours:minutes:seconds, e.g. 00:30:00")
    if not args.local and not slurm_array.has_slurm():
        parser.error("sbatch/squeue not found: grading through Slurm needs Slurm's commands; use --local to grade here")
    if args.local and args.milestone in GPU_MILESTONES:
        _check_gpu(args.milestone)                  # before any record or work folder
    limits = limits_of(args)
    hidden = os.path.abspath(args.hidden_model) if args.hidden_model else None
    plan = grade.Plan(args.milestone, args.size, hidden, grade.resolve_engine(args.engine, args.image, limits),
                      args.image, args.timeout, asdict(limits), os.path.abspath(args.scratch) if args.scratch else None,
                      repeats=args.repeats, hidden_digest=grade.plan_hidden_digest(hidden))
    grade.export_db(args.db)
    from ..grading.sandbox import clean_stale
    clean_stale(args.scratch)
    with open_store() as store:
        listing = grade.plan_tasks(store, args.submissions, plan, args.retry_stopped, args.force)
        if listing.skipped:
            print(f"Skipped {len(listing.skipped)} team(s) whose submission is already graded with these options: "
                  f"{', '.join(shown(team) for team, _ in listing.skipped)}")
        for team, reason in listing.refused:
            print(f"Not graded: {shown(team)}: {reason}")
        for record in listing.failed:
            print(f"Not graded: {shown(record.team)}: {record.reason}")
        settled = None
        if plan.tasks:
            workdir = grade.new_workdir(args.submissions, args.workdir)
            plan.save(workdir / grade.TASKS_FILE)
            print(f"Grading {len(plan.tasks)} team(s), {args.milestone} on {args.size} images; "
                  f"records in {describe(store.url)}")
            if args.local:
                settled = grade.run_local(plan, workdir, store, args.jobs, time_limit, args.python)
            else:
                slurm = slurm_array.SlurmOptions(args.partition, args.account,
                                           None if args.gres.lower() in ("", "none") else args.gres,
                                           args.time, args.cpus_per_task, args.max_parallel, args.sbatch_arg,
                                           exclusive=args.milestone == "m2" and not args.share_nodes)
                _, settled = slurm_array.run_slurm(plan, workdir, store, slurm, args.python)
            if settled.waiting:
                print(f"{len(settled.waiting)} record(s) of this grade wait in the spool {settled.folder}; the next "
                      f"command that opens {describe(store.url)} stores them (python -m ece408_op ranking)")
            if settled.down:
                raise grade.GradeError(f"no ranking: the database does not answer ({settled.down}); "
                                       f"{len(settled.waiting)} record(s) wait in {settled.folder}")
        print(ranking_report(store, args.milestone, args.size, options=plan.options_key(), exact=True).text)
        lines, any_valid = grade.not_valid_lines(store, plan, listing, settled)
    if lines:
        print("\n".join(lines))
    if not any_valid:
        raise grade.GradeError(f"no team of {printable(str(args.submissions))} has a valid run with these options")
    return 0


def _check_gpu(milestone):
    """A GPU milestone graded here needs a GPU here: one line where there is none."""
    try:
        check_device(milestone)
    except SubmitError as exc:
        raise grade.GradeError(f"grade --local --milestone {milestone} runs the GPU path and this host has no CUDA "
                               "GPU (nvidia-smi lists none); grade on a GPU machine (or through Slurm on GPU nodes), "
                               "or use --milestone m2") from exc


def argparse_hidden():
    import argparse
    return argparse.SUPPRESS


def _run_task(args):
    index = args.task_index if args.task_index is not None else os.environ.get("SLURM_ARRAY_TASK_ID")
    if index is None:
        raise grade.GradeError("--run-task needs --task-index or $SLURM_ARRAY_TASK_ID")
    from ..grading.store import Delivery
    record, waiting = grade.run_task(args.run_task, int(index), Delivery())
    where = f"; not stored yet: it waits in {waiting}" if waiting else ""
    print(f"* Record {record.id} ({shown(record.team)}): {record.status}{where}")
    return 0


def main(argv):
    return run(command, argv)
