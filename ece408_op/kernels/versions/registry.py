"""The version table: every kernel version, put in by its own definition.

    @register
    class Strip(Version):
        number, name, kernels = 7, "strip", ("conv_forward_v7",)

``VERSIONS`` maps each number to its Version, in number order. ``discover`` imports every module of
a folder of versions (``kernels/versions/``: its ``__init__`` does), so that a new ``vNN_name.py``
there is in the table without being named anywhere else. Which version runs a layer is not decided
here (``kernels/choice.py``), but the orders it and the autotuner follow are read from the versions'
ranks (``in_order``).
"""
import importlib
import pkgutil

VERSIONS = {}
RANKS = ("fallback_rank", "tune_rank")      # the Version attributes that place a version in an order


def register(cls):
    """Class decorator: put a Version subclass (its own ``number`` and ``name``) into VERSIONS."""
    version = cls()
    for other in VERSIONS.values():
        if version.number == other.number or version.name == other.name:
            raise ValueError(f"{cls.__name__} ({version.label}) clashes with {type(other).__name__} ({other.label})")
    if version.number < 1 or not version.name or not version.kernels:
        raise ValueError(f"{cls.__name__} needs a number of 1 or more, a name and its kernels")
    for rank in RANKS:
        value = getattr(version, rank)
        if value is not None and not version.defaultable:
            raise ValueError(f"{cls.__name__} ({version.label}) has a {rank} but is not defaultable "
                             "(a subclass inherits its parent's ranks: set its own, or None)")
        taken = [other for other in VERSIONS.values() if value is not None and getattr(other, rank) == value]
        if taken:
            raise ValueError(f"{cls.__name__} ({version.label}): {rank} {value} is {taken[0].label}'s "
                             "(a subclass inherits its parent's ranks: set its own, or None)")
    ordered = sorted([*VERSIONS.items(), (version.number, version)])
    VERSIONS.clear()
    VERSIONS.update(ordered)          # (the same dict: every importer of VERSIONS sees it)
    return cls


def unregister(number):
    """Take a version out of the table (a test's own version)."""
    VERSIONS.pop(number, None)


def in_order(rank):
    """The numbers of the versions that have a ``rank`` (one of RANKS), lowest rank first."""
    ranked = [version for version in VERSIONS.values() if getattr(version, rank) is not None]
    return tuple(version.number for version in sorted(ranked, key=lambda version: getattr(version, rank)))


def discover(package, folders):
    """Import every module of ``package`` (found in ``folders``): each version registers itself."""
    for info in sorted(pkgutil.iter_modules(folders), key=lambda info: info.name):
        importlib.import_module(f"{package}.{info.name}")
