"""Container engines: podman and docker (a fresh container per command, removed after it) and
buildah (``buildah run --isolation oci``)."""
import os
import shutil
import tempfile

from ..owner import owner_tag, tag_alive
from .base import Launch, Sandbox, SandboxError, _quiet, engine, gpu_device_nodes


class ImageSandbox(Sandbox):
    """An engine that runs an image (podman, docker, buildah): ``check`` finds its tools
    (``require``) and the image (``inspect_argv``), whose id the record keeps."""

    isolated = True
    auto = True
    build_hint = "{engine} build -t {image} ."

    def require(self):
        if shutil.which(self.engine) is None:
            raise SandboxError(f"engine {self.engine} is not installed")

    def inspect_argv(self):
        return [self.engine, "image", "inspect", "--format", "{{.Id}}", self.image]

    def check(self):
        self.require()
        inspect = _quiet(self.inspect_argv())
        if inspect.returncode != 0:
            raise SandboxError(f"image {self.image} not found by {self.engine}; build it first "
                               f"({self.build_hint.format(engine=self.engine, image=self.image)}) or name another "
                               "one with --image")
        self.image_id = inspect.stdout.strip()
        return self


class ContainerSandbox(ImageSandbox):
    """podman or docker: a fresh container per command, removed after it."""

    def require(self):
        super().require()
        if self.engine == "docker" and _quiet(["docker", "info", "--format", "{{.ServerVersion}}"], 15).returncode:
            raise SandboxError("engine docker: its daemon does not answer (docker info)")

    def launch(self, step, name):
        L = self.limits
        argv = [self.engine, "run", "--rm", "-i", "--name", name, "--label", f"ece408.runner={owner_tag()}",
                "--user", f"{self.uid}:{self.uid}", "--read-only", "--cap-drop", "ALL",
                "--security-opt", "no-new-privileges", "--pids-limit", str(L.processes),
                "--memory", str(L.memory), "--memory-swap", str(L.memory),
                "--ulimit", f"cpu={L.cpu_seconds}:{L.cpu_seconds}", "--ulimit", f"fsize={L.file_size}:{L.file_size}",
                "--ulimit", "core=0:0", "--ulimit", "nofile=4096:4096", "--ulimit", f"nproc={L.processes}:{L.processes}",
                "--tmpfs", f"/tmp:rw,size={L.disk},mode=1777",
                "--workdir", step.cwd, "--entrypoint", step.argv[0]]
        if not self.network:
            argv += ["--network", "none"]
        if step.gpu:
            argv += ["--gpus", "all"] if self.engine == "docker" else \
                [a for node in gpu_device_nodes() for a in ("--device", node)]
        for m in step.mounts:
            argv += ["-v", f"{m.source}:{m.target}:{'rw' if m.writable else 'ro'}"]
        for key, value in step.env.items():
            argv += ["-e", f"{key}={value}"]
        argv += [self.image, *step.argv[1:]]
        engine = self.engine
        # the client's own folder: conmon writes a file named "oom" into it when the kernel kills the
        # container for its memory limit, and nothing of a run may be left behind
        here = tempfile.mkdtemp(prefix="ece408-client-")

        def cleanup():
            _quiet([engine, "rm", "-f", name], timeout=120)
            shutil.rmtree(here, ignore_errors=True)
        return Launch(argv, dict(os.environ), cleanup, cwd=here)


    @classmethod
    def clean_stale(cls):
        if shutil.which(cls.engine) is None or (cls.engine == "docker" and
                                                _quiet(["docker", "info"], 10).returncode != 0):
            return []
        removed = []
        out = _quiet([cls.engine, "ps", "-a", "--filter", "label=ece408.runner", "--format",
                      '{{.Names}} {{index .Labels "ece408.runner"}}'], 30)
        for line in out.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and not tag_alive(parts[1]):
                _quiet([cls.engine, "rm", "-f", parts[0]], 60)
                removed.append(f"{cls.engine} container {parts[0]}")
        return removed


@engine
class PodmanSandbox(ContainerSandbox):
    engine = "podman"


@engine
class DockerSandbox(ContainerSandbox):
    engine = "docker"


@engine
class BuildahSandbox(ImageSandbox):
    """buildah: ``buildah run --isolation oci`` (namespaces, not chroot), one working container per
    command, made with the memory limit and a process-count ulimit."""

    engine = "buildah"
    build_hint = "buildah bud -t {image} ."

    def require(self):
        super().require()
        if shutil.which("runc") is None and shutil.which("crun") is None:
            raise SandboxError("engine buildah runs with --isolation oci, which needs runc or crun")

    def inspect_argv(self):
        return ["buildah", "inspect", "--type", "image", "--format", "{{.FromImageID}}", self.image]

    def launch(self, step, name):
        L = self.limits
        made = _quiet(["buildah", "from", "--pull=never", "--name", name, "--memory", str(L.memory),
                       "--memory-swap", str(L.memory), "--ulimit", f"nproc={L.processes}:{L.processes}",
                       "--ulimit", f"cpu={L.cpu_seconds}:{L.cpu_seconds}", "--ulimit", "nofile=4096:4096",
                       "--cap-drop", "all", self.image], timeout=300)
        if made.returncode != 0:
            raise SandboxError(f"buildah could not start {self.image}: "
                               f"{(made.stderr.strip().splitlines() or ['no reason given'])[-1]}")
        # buildah 1.28: "--network none" is read as the flag without its value (the "=" form is
        # needed), and any other namespace flag (--pid, --ipc, --uts) brings the host's network
        # back; oci isolation gives private pid, ipc and uts namespaces by default
        argv = ["buildah", "run", "--isolation=oci", f"--user={self.uid}:{self.uid}",
                f"--workingdir={step.cwd}", f"--mount=type=tmpfs,destination=/tmp,tmpfs-size={L.disk}"]
        if not self.network:
            argv += ["--network=none"]
        if step.gpu:
            argv += [a for node in gpu_device_nodes() for a in ("--device", node)]
        for m in step.mounts:
            argv += ["-v", f"{m.source}:{m.target}:{'rw' if m.writable else 'ro'}"]
        for key, value in step.env.items():
            argv += ["--env", f"{key}={value}"]
        argv += [name, "--", *step.argv]

        def cleanup():
            _quiet(["buildah", "rm", name], timeout=120)
        return Launch(argv, dict(os.environ), cleanup)


    @classmethod
    def clean_stale(cls):
        if not shutil.which("buildah"):
            return []
        removed = []
        out = _quiet(["buildah", "containers", "--format", "{{.ContainerName}}"], 30)
        for line in out.stdout.split():
            if line.startswith("run-") and not tag_alive(line[4:]):
                _quiet(["buildah", "rm", line], 60)
                removed.append(f"buildah container {line}")
        return removed
