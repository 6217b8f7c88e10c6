"""Builds libtyr (the Go client as a C shared library) into the tyr package.

`pip install .` runs `go build -buildmode=c-shared ./libtyr` (Go from PATH, or
$GO) and ships libtyr.so inside a platform wheel; the header cgo writes beside
it stays out of the package. The metadata is in pyproject.toml.
"""

import os
import shutil
import subprocess
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]

ROOT = os.path.dirname(os.path.abspath(__file__))
LIBNAME = "libtyr.so"


def build_libtyr(dest_dir):
    """Build libtyr into dest_dir/libtyr.so; only the library, not cgo's header."""
    go = os.environ.get("GO", "go")
    if shutil.which(go) is None:
        sys.exit(
            f"building tyr needs Go ({go!r} is not on PATH; set GO to its path): "
            "libtyr, the C library the bindings call, is built from ./libtyr"
        )
    env = dict(os.environ, CGO_ENABLED="1")
    os.makedirs(dest_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="libtyr-") as tmp:
        out = os.path.join(tmp, LIBNAME)
        cmd = [go, "build", "-trimpath", "-buildmode=c-shared", "-o", out, "./libtyr"]
        print("building libtyr:", " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)
        shutil.copyfile(out, os.path.join(dest_dir, LIBNAME))


class BuildPyWithLibtyr(build_py):
    """build_py that also builds libtyr into the package."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            dest = os.path.join(ROOT, "python", "tyr")
        else:
            dest = os.path.join(self.build_lib, "tyr")
        build_libtyr(dest)

    def get_outputs(self, include_bytecode=True):
        outputs = list(super().get_outputs(include_bytecode))
        lib = os.path.join(self.build_lib, "tyr", LIBNAME)
        if lib not in outputs:
            outputs.append(lib)
        return outputs


class BinaryDistribution(Distribution):
    """The package holds a native library: never a pure distribution."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    """A wheel for the platform, not for one Python: libtyr is loaded with cffi's ABI mode."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildPyWithLibtyr, "bdist_wheel": PlatformWheel},
)
