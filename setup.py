"""ece408_op: the UIUC ECE 408 convolution project harness as an MXNet 1.9.1 plugin."""
import runpy
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.develop import develop

HERE = Path(__file__).resolve().parent
# What the package needs, base and extras: one table, also read by the command line's hints
EXTRAS = runpy.run_path(str(HERE / "ece408_op" / "base" / "extras.py"))

# Installed beside the package in site-packages: at interpreter start-up it installs the import
# hook (ece408_op/mx/hook.py: standard library only, no NumPy), so that `import mxnet` works and
# registers ece408_conv whatever the import order. A broken install must not break Python itself.
HOOK_PTH = "ece408_op-hook.pth"
HOOK_LINE = "import sys; exec('try:\\n import ece408_op\\nexcept Exception:\\n pass')\n"


class BuildPyWithHook(build_py):
    """build_py that also writes the start-up hook into the build's top level (so into the
    wheel's root: site-packages), for normal and editable (PEP 660) installs alike."""

    def run(self):
        super().run()
        folders = [self.build_lib]
        if getattr(self, "editable_mode", False):
            # setuptools' editable_wheel points `install_lib` at the unpacked wheel's root and
            # packs that folder as it is (build_lib is thrown away in editable mode)
            folders.append(self.distribution.get_command_obj("install").install_lib)
        for folder in filter(None, folders):
            target = Path(folder) / HOOK_PTH
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(HOOK_LINE)

    def get_outputs(self, *args, **kwargs):  # noqa: D102  (the wheel's file list)
        return super().get_outputs(*args, **kwargs) + [str(Path(self.build_lib) / HOOK_PTH)]

    def get_output_mapping(self):
        mapping = dict(super().get_output_mapping())
        mapping[str(Path(self.build_lib) / HOOK_PTH)] = str(Path(self.build_lib) / HOOK_PTH)
        return mapping


class DevelopWithHook(develop):
    """The legacy editable install (`setup.py develop`, pip without PEP 660): the hook too."""

    def run(self):
        super().run()
        if not self.uninstall:
            (Path(self.install_dir) / HOOK_PTH).write_text(HOOK_LINE)

setup(
    name="ece408_op",
    version="0.1.0",
    description="ECE 408 forward-convolution project harness: an MXNet 1.9.1 custom operator "
                "with NumPy (CPU) and PyCUDA (GPU) paths, Fashion-MNIST models and milestone scripts, "
                "and the class's submission service and its client",
    long_description=(HERE / "README.md").read_text(encoding="utf-8") if (HERE / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.9",
    packages=find_packages(include=["ece408_op", "ece408_op.*"]),
    package_data={"ece408_op": ["kernels/*.cu", "kernels/*.json",
                                "tasks/conv/README.md", "tasks/conv/template/*", "tasks/conv/solutions/*/*/*",   # the task
                                "service/templates/*.html", "service/static/*"]},       # the service's pages
    # the trained checkpoints are a distribution of their own (models/setup.py), which the mxnet extra needs
    # the base install is the class's client (pure Python, any system); each extra one part's needs
    install_requires=EXTRAS["install_requires"](),
    extras_require=EXTRAS["extras_require"](),
    cmdclass={"build_py": BuildPyWithHook, "develop": DevelopWithHook},
    entry_points={"console_scripts": ["ece408 = ece408_op.cli:main"]},
)
