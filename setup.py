"""Builds and installs accord's Python package (``accord``, with ``accord.torch``).

``pip install .`` (or ``pip install --no-build-isolation .`` in a venv made
with ``python3 -m venv --system-site-packages``) runs CMake on this
repository -- Release, without tests, benchmarks or examples -- builds the
``accord_python`` and ``accordrun_staged`` targets, and packages the tree
CMake stages in ``<build>/python/accord``: the pure-Python modules of
``bindings/python/accord`` and ``frameworks/torch/python`` (as real files),
``_core*.so`` and ``libaccord.so.<major>``, which the module finds through its
``$ORIGIN`` RPATH, and the launcher ``bin/accordrun`` (RPATH ``$ORIGIN/..``),
which the console command ``accordrun`` (``accord._launcher:main``) runs.

Environment knobs:
    ACCORD_BUILD_TYPE    CMake build type (default Release)
    ACCORD_BUILD_JOBS    parallel build jobs (default 2)
    ACCORD_CMAKE_ARGS    extra CMake arguments, shell-quoted
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
SETUP_DIR = "build-setup"
os.makedirs(ROOT / SETUP_DIR, exist_ok=True)


def project_version() -> str:
    text = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(\s*accord\s+VERSION\s+([0-9.]+)", text)
    if not match:
        raise RuntimeError("cannot find the project version in CMakeLists.txt")
    return match.group(1)


class CMakeExtension(Extension):
    """The extension module accord._core, built by CMake rather than setuptools."""

    def __init__(self, name: str):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Configures and builds with CMake, then copies the staged package into build_lib."""

    def run(self):
        if self.inplace:
            raise RuntimeError(
                "accord does not support in-place (editable) builds; for development, "
                "build with CMake and use PYTHONPATH=<build>/python"
            )
        build_dir = Path(self.build_temp).resolve() / "cmake"
        configure = [
            "cmake",
            "-S",
            str(ROOT),
            "-B",
            str(build_dir),
            f"-DCMAKE_BUILD_TYPE={os.environ.get('ACCORD_BUILD_TYPE', 'Release')}",
            "-DACCORD_BUILD_TESTS=OFF",
            "-DACCORD_BUILD_BENCHMARKS=OFF",
            "-DACCORD_BUILD_EXAMPLES=OFF",
            "-DACCORD_BUILD_PYTHON=ON",
            "-DACCORD_BUILD_LAUNCHER=ON",
            # The package ships no LibTorch C++ adapter (CMake's install does).
            "-DACCORD_BUILD_TORCH=OFF",
            f"-DPython3_EXECUTABLE={sys.executable}",
        ]
        try:  # a pybind11 installed as a Python package (e.g. in an isolated build environment)
            import pybind11

            configure.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        except ImportError:
            pass  # CMake finds the system's (Debian: pybind11-dev)
        configure += shlex.split(os.environ.get("ACCORD_CMAKE_ARGS", ""))
        jobs = os.environ.get("ACCORD_BUILD_JOBS", "2")
        subprocess.check_call(configure)
        subprocess.check_call(
            ["cmake", "--build", str(build_dir), "--target", "accord_python", "accordrun_staged", "-j", jobs]
        )

        staged = build_dir / "python" / "accord"
        target = Path(self.build_lib) / "accord"
        if target.exists():
            shutil.rmtree(target)
        # symlinks=False: the staged .py files and accord/torch are links into
        # the source tree; the package gets copies.
        shutil.copytree(
            staged, target, symlinks=False, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")
        )


# The rest of the metadata (name, dependencies, the accordrun command) is in
# pyproject.toml.
setup(
    version=project_version(),
    packages=[],
    ext_modules=[CMakeExtension("accord._core")],
    cmdclass={"build_ext": CMakeBuild},
    # Keep setuptools' work files (and the .egg-info) out of build/, the
    # default CMake build directory, and out of the source tree.
    options={"build": {"build_base": SETUP_DIR}, "egg_info": {"egg_base": SETUP_DIR}},
    zip_safe=False,
)
