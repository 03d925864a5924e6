"""The host engine: no isolation at all, asked for by name only (a machine where no sandbox runs);
its runs are marked "not isolated" in the transcript and the record."""
import os

from .base import ATTACH, Launch, Sandbox, _prlimit, engine
from .cgroup import Cgroup


@engine
class HostSandbox(Sandbox):
    """No isolation: the command runs here, as the runner's user (asked for by name only)."""

    engine = "host"
    isolated = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.uid = os.getuid()

    def launch(self, step, name):
        mounts = {m.target: m.source for m in step.mounts}
        argv = [_host_path(word, mounts) for word in step.argv]
        env = {**step.env, "PATH": _host_path(step.env.get("PATH", os.environ.get("PATH", "")), mounts)}
        group = Cgroup.create(name, self.limits)
        cwd = mounts.get(step.cwd, step.cwd)
        if group is not None:
            argv = ["/bin/sh", "-c", ATTACH, "sh", *argv]
            env["ECE408_CGROUP"] = " ".join(group.procs_files())
        return Launch(_prlimit(self.limits) + ["--"] + argv, env, group.remove if group else None, group, cwd)


def _host_path(word, mounts):
    """``word`` with each mount target (/src, /build...) standing as a whole path component for
    its host folder (``/src/*``, ``"cp -r /src/* /build"``, ``--out=/build``; not ``/usr/src``)."""
    import re
    for target in sorted(mounts, key=len, reverse=True):
        pattern = r"(?<![\w.~/-])" + re.escape(target) + r"(?![\w.-])"
        word = re.sub(pattern, lambda m, host=mounts[target]: host, word)
    return word


