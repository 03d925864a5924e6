"""``python -m ece408_op worker --server URL``: run the service's jobs on this machine, one at
a time per GPU, each in its sandbox. Its token (a worker's: teams worker NAME) comes from
$ECE408_TOKEN or --token-file, never from the command line."""
import argparse

from .errors import ArgumentParser, run
from .argtypes import positive


def command(argv):
    import os

    from ..grading.sandbox import ENGINES
    from ..client.api import check_url, read_token_file
    from ..service.worker import WorkerError, WorkerOptions, run_worker
    parser = ArgumentParser(prog="ece408_op worker",
                            description="Take jobs from the class's service and run them here, one at a time per GPU "
                                        "(a CPU slot where there is none), each in its sandbox.")
    parser.add_argument("--server", metavar="URL", help="the service (default $ECE408_SERVER)")
    parser.add_argument("--token-file", metavar="PATH", help="the worker token's file (default $ECE408_TOKEN)")
    parser.add_argument("--gpus", default="auto", metavar="LIST",
                        help="GPU indices, one slot each ('0,1'); 'none': CPU slots; 'visible': one slot on the GPU "
                             "$CUDA_VISIBLE_DEVICES names (a Slurm job); default: every GPU, else one CPU slot")
    parser.add_argument("--slots", type=int, default=1, metavar="N", help="CPU slots with --gpus none (default 1)")
    parser.add_argument("--slot", help=argparse.SUPPRESS)          # serve's local workers: the slot's name
    parser.add_argument("--once", action="store_true", help="one job, then exit (a Slurm job)")
    parser.add_argument("--kind", metavar="NAME",
                        help="report NAME as every slot's device kind: take only jobs asking for it or for none "
                             "(serve --slurm's jobs for a kind its --slurm-kind maps)")
    parser.add_argument("--engine", choices=("auto", *ENGINES), help="the sandbox of the runs (default auto)")
    parser.add_argument("--scratch", metavar="DIR", help="where runs unpack and build (default $TMPDIR)")
    parser.add_argument("--hidden-model", metavar="PREFIX", help="staff's hidden third model for ranked runs")
    parser.add_argument("--patience", type=positive, default=600.0, metavar="SECONDS",
                        help="how long an unreachable server is waited for (default 600)")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    parser.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    args = parser.parse_args(argv)
    server = args.server or os.environ.get("ECE408_SERVER")
    if not server:
        parser.error("give --server URL (or set $ECE408_SERVER)")
    server = check_url(server)
    kind = None
    if args.kind is not None:
        from ..service.grading_door import kind_of
        from ..base.names import printable
        kind = kind_of(args.kind)
        if kind is None or printable(kind, 100) != kind:
            parser.error("--kind is a device kind's name: printable, 1 to 100 characters")
    if args.token_file:
        token = read_token_file(args.token_file)
    elif os.environ.get("ECE408_TOKEN"):
        token = os.environ["ECE408_TOKEN"].strip()
    else:
        raise WorkerError("the worker needs its token: --token-file PATH or $ECE408_TOKEN (teams worker NAME makes one)")
    options = WorkerOptions(server=server, token=token, gpus=args.gpus, slots=args.slots, slot=args.slot,
                            once=args.once, kind=kind, engine=args.engine,
                            scratch=args.scratch, hidden_model=args.hidden_model, patience=args.patience,
                            log_level=args.log_level)
    return run_worker(options)


def main(argv):
    return run(command, argv)
