"""Real services started by the tests on this machine, and stopped afterwards:
a one-node Slurm cluster (munged, slurmctld, slurmd, as root) and a PostgreSQL server on the
loopback address. Each ``start_*`` returns an object with ``stop()``, or raises Unavailable
with the reason (the tests then skip). Only processes started here are stopped, by their id."""
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path


class Unavailable(Exception):
    """What a service needs is missing here."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(procs):
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_for(check, timeout, what, log=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    tail = Path(log).read_text(errors="replace")[-2000:] if log and Path(log).exists() else ""
    raise RuntimeError(f"{what} did not come up in {timeout} s\n{tail}")


# ---------------------------------------------------------------------------- Slurm

SLURM_COMMANDS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")


class SlurmCluster:
    """One node (this host, by its own hostname) in two partitions: ``test`` (the default) and
    ``KIND_PARTITION`` (where serve --slurm-kind sends a kind's jobs); SLURM_CONF set in ``env``."""
    KIND_PARTITION = "h100"

    def __init__(self, root):
        self.root = Path(root)
        self.procs = []
        self.conf = self.root / "slurm.conf"
        self.env = {"SLURM_CONF": str(self.conf)}

    def start(self):
        missing = [c for c in SLURM_COMMANDS if shutil.which(c) is None]
        if missing:
            raise Unavailable(f"Slurm/munge not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge")
        if os.geteuid() != 0:
            raise Unavailable("slurmd and munged run as root here; the tests are not root")
        root = self.root
        for d in ("munge", "state", "spool"):
            (root / d).mkdir(parents=True, exist_ok=True)
        os.chmod(root / "munge", 0o700)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        socket_path = root / "munge" / "munge.socket"
        self.procs.append(subprocess.Popen(
            ["munged", "--foreground", "--force", f"--socket={socket_path}", f"--key-file={key}",
             f"--pid-file={root / 'munge' / 'munged.pid'}", f"--log-file={root / 'munge' / 'munged.log'}",
             f"--seed-file={root / 'munge' / 'munged.seed'}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        _wait_for(socket_path.exists, 20, "munged", root / "munge" / "munged.log")
        host = socket.gethostname()
        cpus = os.cpu_count() or 1
        self.conf.write_text("\n".join([
            "ClusterName=ece408test",
            f"SlurmctldHost={host}",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={socket_path}",
            "SlurmUser=root", "SlurmdUser=root",
            f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}", f"SlurmdLogFile={root / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill", "MpiDefault=none", "ReturnToService=2",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "KillWait=10", "MinJobAge=300", "SlurmdTimeout=60", "InactiveLimit=0",
            f"NodeName={host} CPUs={cpus} State=UNKNOWN",
            f"PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP",
            f"PartitionName={self.KIND_PARTITION} Nodes={host} Default=NO MaxTime=INFINITE State=UP",
            ""]))
        env = {**os.environ, **self.env}
        self.procs.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(self.conf)], env=env,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        self.procs.append(subprocess.Popen(["slurmd", "-D", "-f", str(self.conf)], env=env,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))

        def node_idle():
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=env)
            return out.returncode == 0 and out.stdout.strip() in ("idle", "mix", "alloc")
        try:
            _wait_for(node_idle, 60, "the Slurm node", root / "slurmctld.log")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        _stop(self.procs)
        self.procs = []


# ---------------------------------------------------------------------------- PostgreSQL

def postgres_tool(name):
    """``name`` on PATH, else in Debian's /usr/lib/postgresql/<version>/bin (newest first)."""
    found = shutil.which(name) or next(iter(sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"),
                                                   key=lambda p: p.parts[-3], reverse=True)), None)
    if found is None:
        raise Unavailable(f"{name} not found: apt-get install postgresql")
    return str(found)


class Postgres:
    """initdb + pg_ctl as the ``postgres`` user (initdb refuses root), on 127.0.0.1 only."""

    def __init__(self, root):
        self.root = Path(root)
        self.port = free_port()
        self.data = self.root / "pgdata"
        self.url = self.url_of("ece408")
        self.started = False

    def url_of(self, database):
        return f"postgresql://ece408:grading@127.0.0.1:{self.port}/{database}"

    def create_database(self, name):
        """A new empty database; returns its URL."""
        import psycopg
        with psycopg.connect(self.url_of("postgres"), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url_of(name)

    def _as_user(self, argv):
        if os.geteuid() == 0:
            return ["runuser", "-u", self.user, "--", *argv]
        return argv

    def start(self):
        self.initdb, self.pg_ctl = (postgres_tool("initdb"), postgres_tool("pg_ctl"))
        try:
            import psycopg  # noqa: F401
        except ImportError:
            raise Unavailable("psycopg is not installed: pip install 'psycopg[binary]'")
        self.user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam(self.user)
            except KeyError:
                raise Unavailable("no 'postgres' user to run the server as (initdb refuses root)")
            self.root.mkdir(parents=True, exist_ok=True)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            os.chmod(self.root, 0o700)
            for parent in self.root.parents:            # the server must reach its folder
                if parent == Path("/"):
                    break
                os.chmod(parent, os.stat(parent).st_mode | 0o011)
        pwfile = self.root / "pw"
        pwfile.write_text("grading\n")
        if os.geteuid() == 0:
            os.chown(pwfile, pw.pw_uid, pw.pw_gid)
        run = dict(capture_output=True, text=True, timeout=120)
        out = subprocess.run(self._as_user([self.initdb, "-D", str(self.data), "-U", "ece408", "-A", "scram-sha-256",
                                            f"--pwfile={pwfile}", "--no-sync"]), **run)
        if out.returncode != 0:
            raise RuntimeError(f"initdb failed: {out.stderr}")
        self._pg_start()
        self.create_database("ece408")
        return self

    def _pg_start(self):
        options = f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off -c max_connections=100"
        out = subprocess.run(self._as_user([self.pg_ctl, "-D", str(self.data), "-o", options, "-l",
                                            str(self.root / "server.log"), "-w", "start"]),
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {out.stderr}\n{(self.root / 'server.log').read_text()}")
        self.started = True

    def start_again(self):
        """The same server, data and port, after ``stop``."""
        self._pg_start()
        return self

    def stop(self):
        if self.started:
            subprocess.run(self._as_user([self.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop"]),
                           capture_output=True, timeout=120)
            self.started = False
