"""``rai_build.yml``: the course's submission file, read and checked against its schema.

    rai:
      version: 0.2
      image: ece408_op:latest
    resources:
      cpu:
        architecture: amd64
      gpu:                      # optional: CPU-only milestones may leave it out
        architecture: hopper
        count: 1
      network: false            # optional, default false
    commands:
      build:
        - /bin/bash -c "cp -rv /src/* /build"
        - python /build/scripts/m2.1.py 100

Every schema error gets its own message (missing key, wrong type, unknown architecture,
empty build list, network not a boolean); ``load_config`` raises one ConfigError listing
them all, one per line.
"""
from dataclasses import dataclass
from pathlib import Path

from ..errors import Ece408Error

CONFIG_NAME = "rai_build.yml"
CPU_ARCHITECTURES = ("amd64", "arm64", "ppc64le")
GPU_ARCHITECTURES = ("kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell")


class ConfigError(Ece408Error):
    """An unreadable or invalid rai_build.yml; ``problems`` holds one message per error."""

    def __init__(self, path, problems):
        self.path = Path(path)
        self.problems = list(problems)
        # cli.errors prints "error: " before the first line; give every other line its own.
        super().__init__("\nerror: ".join(f"{self.path.name}: {p}" for p in self.problems))


@dataclass(frozen=True)
class BuildConfig:
    version: str
    image: str
    cpu_architecture: str
    gpu_architecture: str        # None without a gpu section
    gpu_count: int
    network: bool
    commands: tuple


def _type_name(value):
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a mapping", type(None): "empty"}.get(type(value), type(value).__name__)


class _Checker:
    """Walks the parsed YAML, collecting one message per problem."""

    def __init__(self, document):
        self.document = document
        self.problems = []

    def get(self, dotted, kinds, what, required=True):
        """The value at ``a.b.c`` if it has one of ``kinds``; else records the problem, returns None."""
        node = self.document
        parts = dotted.split(".")
        for depth, part in enumerate(parts):
            where = ".".join(parts[:depth])
            if not isinstance(node, dict):
                if node is not None or required:
                    self.problems.append(f"{where} must be a mapping, not {_type_name(node)}")
                return None
            if part not in node:
                if required:
                    self.problems.append(f"missing key {dotted}")
                return None
            node = node[part]
        if not isinstance(node, kinds) or (bool in kinds) != isinstance(node, bool):
            self.problems.append(f"{dotted} must be {what}, not {_type_name(node)} ({node!r})")
            return None
        return node

    def choice(self, dotted, allowed, required=True):
        value = self.get(dotted, (str,), "a string", required)
        if value is not None and value.lower() not in allowed:
            self.problems.append(f"unknown {dotted} {value!r}; use one of {', '.join(allowed)}")
            return None
        return value.lower() if value is not None else None


def check_config(document):
    """(BuildConfig or None, [problems]) for a parsed rai_build.yml."""
    if not isinstance(document, dict):
        return None, [f"the file must be a mapping with keys rai, resources, commands, not {_type_name(document)}"]
    c = _Checker(document)
    version = c.get("rai.version", (str, int, float), "a version such as 0.2")
    image = c.get("rai.image", (str,), "an image name such as ece408_op:latest")
    if image is not None and not image.strip():
        c.problems.append("rai.image is empty; name the image to run the build in")
    cpu = c.choice("resources.cpu.architecture", CPU_ARCHITECTURES)
    gpu_arch, gpu_count = None, 0
    if isinstance(document.get("resources"), dict) and "gpu" in document["resources"]:
        gpu_arch = c.choice("resources.gpu.architecture", GPU_ARCHITECTURES)
        gpu_count = c.get("resources.gpu.count", (int,), "an integer (0 for CPU-only milestones)")
        if gpu_count is not None and gpu_count < 0:
            c.problems.append(f"resources.gpu.count must be 0 or more, not {gpu_count}")
    network = c.get("resources.network", (bool,), "a boolean (true or false)", required=False)
    build = c.get("commands.build", (list,), "a list of commands")
    if build is not None:
        if not build:
            c.problems.append("commands.build is empty; list at least one command")
        for i, command in enumerate(build):
            if not isinstance(command, str) or not command.strip():
                c.problems.append(f"commands.build[{i}] must be a non-empty string, not {_type_name(command)}")
    if c.problems:
        return None, c.problems
    return BuildConfig(str(version), image.strip(), cpu, gpu_arch, gpu_count or 0, bool(network),
                       tuple(build)), []


def load_config(folder):
    """Read and check ``folder/rai_build.yml``; raises ConfigError with every problem found."""
    import yaml
    path = Path(folder) / CONFIG_NAME
    if not path.is_file():
        raise ConfigError(path, [f"not found in {Path(folder)}; every submission needs one at its top level"])
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(path, [f"not valid YAML: {first}"]) from exc
    config, problems = check_config(document)
    if problems:
        raise ConfigError(path, problems)
    return config
