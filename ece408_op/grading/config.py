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
empty build list, network not a boolean, a command that does not split into words); ``load_config``
raises one ConfigError listing them all, one per line. A message never quotes the file's values
(a team's file may be a link to someone else's YAML, or a bomb): it names the key and the type.

The file is read defensively: a regular file (not a symbolic link) of at most MAX_BYTES, no NUL,
UTF-8; YAML without aliases (a "billion laughs" alias bomb) and nested at most MAX_DEPTH deep.
"""
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..base.extras import install_hint
from ..base.files import IsLink, NotRegular, TooLarge, read_regular
from ..base.terms import CONFIG_NAME
from ..errors import Ece408Error

MAX_BYTES = 64 << 10
MAX_DEPTH = 20
MAX_COMMANDS = 100
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
            self.problems.append(f"{dotted} must be {what}, not {_type_name(node)}")
            return None
        return node

    def choice(self, dotted, allowed, required=True):
        value = self.get(dotted, (str,), "a string", required)
        if value is not None and value.lower() not in allowed:
            shown = repr(value) if len(value) <= 20 and value.isprintable() else "value"
            self.problems.append(f"unknown {dotted} {shown}; use one of {', '.join(allowed)}")
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
        if len(build) > MAX_COMMANDS:
            c.problems.append(f"commands.build has {len(build)} commands; at most {MAX_COMMANDS}")
        for i, command in enumerate(build[:MAX_COMMANDS]):
            if not isinstance(command, str) or not command.strip():
                c.problems.append(f"commands.build[{i}] must be a non-empty string, not {_type_name(command)}")
                continue
            problem = command_problem(command)
            if problem:
                c.problems.append(f"commands.build[{i}] {problem}")
    if c.problems:
        return None, c.problems
    return BuildConfig(str(version), image.strip(), cpu, gpu_arch, gpu_count or 0, bool(network),
                       tuple(build)), []


def split_command(command):
    """A command line split into words as a shell would (quotes), or ConfigError's reason."""
    return shlex.split(command)


def command_problem(command):
    """None, or why ``command`` cannot be run (one short phrase)."""
    if "\0" in command:
        return "holds a NUL character"
    try:
        words = split_command(command)
    except ValueError as exc:
        return f"does not split into words ({exc}); close its quotes"
    if not words:
        return "is empty"
    return None


def _loader():
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader without aliases and with a nesting limit (no recursion past MAX_DEPTH)."""
        depth = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.events.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(None, None, "uses a YAML alias (*name); write the value out",
                                                  event.start_mark)
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"is nested more than {MAX_DEPTH} levels deep",
                                                  self.peek_event().start_mark)
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1
    return Loader


def read_config_text(path):
    """The text of the config file at ``path``: a regular file (never through a link), at most
    MAX_BYTES, UTF-8 without NUL; ConfigError otherwise."""
    try:
        data = read_regular(os.fsencode(path), MAX_BYTES)
    except FileNotFoundError:
        raise ConfigError(path, [f"not found in {_shown(Path(path).parent)}; every submission needs one at its "
                                 "top level"]) from None
    except IsLink:
        raise ConfigError(path, ["cannot be read: it is a symbolic link; commit the file itself"]) from None
    except NotRegular:
        raise ConfigError(path, ["is not a regular file"]) from None
    except TooLarge:
        raise ConfigError(path, [f"is larger than {MAX_BYTES >> 10} KiB; the course's file is a few lines"]) from None
    except OSError as exc:
        raise ConfigError(path, [f"cannot be read: {exc.strerror or exc}"]) from None
    if b"\0" in data:
        raise ConfigError(path, ["holds a NUL byte; it must be a text file"])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(path, ["is not UTF-8 text"]) from None


def _shown(path):
    from ..base.names import printable
    return printable(os.fsdecode(os.fspath(path)), limit=400)


def load_config(folder):
    """Read and check ``folder/rai_build.yml``; raises ConfigError with every problem found."""
    path = Path(os.fsdecode(os.fspath(folder))) / CONFIG_NAME
    try:
        import yaml
    except ImportError:
        raise ConfigError(path, [f"cannot be read here: PyYAML is not installed ({install_hint('mxnet')})"]) from None
    text = read_config_text(path)
    try:
        document = yaml.load(text, Loader=_loader())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "cannot be parsed"
        raise ConfigError(path, [f"not valid YAML{where}: {problem}"]) from None
    except RecursionError:
        raise ConfigError(path, ["not valid YAML: nested too deeply"]) from None
    config, problems = check_config(document)
    if problems:
        raise ConfigError(path, problems)
    return config


def value_line(text, dotted):
    """The line (from 1) where the value at ``a.b.c`` starts in the YAML ``text`` (a rai_build.yml
    that ``check_config`` took: a refusal names the line a team changes), or None where it has none.
    Read as ``load_config`` reads (no aliases, nested at most MAX_DEPTH); of a key given twice, the
    last (the value the loader keeps)."""
    import yaml
    try:
        node = yaml.compose(text, Loader=_loader())
    except (yaml.YAMLError, RecursionError):
        return None
    for part in dotted.split("."):
        if not isinstance(node, yaml.MappingNode):
            return None
        found = [v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part]
        if not found:
            return None
        node = found[-1]
    return node.start_mark.line + 1
