"""How accord sits in a user's Python environment: imports in any order, and a clear error without torch.

Each case runs a fresh interpreter (the one running the tests, so on CI's second leg a venv with torch
from PyPI and accord installed by ``pip install .``).
"""

import glob
import os
import shutil
import subprocess
import sys

import pytest


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_accord_loads_no_nccl():
    """libaccord does not link NCCL: only a CUDA collective loads it, preferring the process's own."""
    result = run("import accord\nmaps = open('/proc/self/maps').read()\nprint('libnccl' in maps)\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False", "import accord loaded an NCCL library"


@pytest.mark.parametrize("order", ["accord first", "torch first"])
def test_accord_and_torch_import_in_either_order(order):
    torch_ = pytest.importorskip("torch")
    imports = "import accord\nimport torch\n" if order == "accord first" else "import torch\nimport accord\n"
    result = run(
        imports + "import accord.torch as hvd\nprint(torch.__version__, type(hvd.nccl_built()) is int)\n"
    )
    assert result.returncode == 0, f"{order}: {result.stderr}"
    assert result.stdout.split() == [torch_.__version__, "True"], f"{order}: {result.stdout}"


def test_a_collective_before_init_names_hvd_init():
    """As Horovod's does, the refusal names init() as a Python user calls it; Horovod raises a
    RuntimeError here and ValueError from rank(): accord's RequestError is both."""
    pytest.importorskip("torch")
    result = run(
        "import torch\nimport accord.torch as hvd\n"
        "print(hvd.mpi_enabled(), hvd.mpi_built())\n"
        "for call in (lambda: hvd.allreduce(torch.ones(2)), lambda: hvd.allgather(torch.ones(2)),\n"
        "             lambda: hvd.broadcast_parameters({'w': torch.ones(2)}, 0), hvd.rank):\n"
        "    try:\n"
        "        call()\n"
        "    except Exception as e:\n"
        "        print(type(e).__name__, isinstance(e, ValueError), isinstance(e, RuntimeError), e)\n"
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 5 and lines[0] == "False True", result.stdout  # mpi_enabled() before init: False
    for line in lines[1:]:
        assert line.startswith(
            "RequestError True True accord is not initialised: call hvd.init() (accord.init()) first"
        ), line


def test_accord_torch_without_torch_says_what_to_do():
    # sys.modules['torch'] = None makes `import torch` fail as if torch were not installed.
    result = run("import sys\nsys.modules['torch'] = None\nimport accord\nimport accord.torch\n")
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: accord.torch needs PyTorch"), result.stderr
    assert "pip install torch" in last, last
    # accord itself needs no torch.
    plain = run("import sys\nsys.modules['torch'] = None\nimport accord\nprint(accord.__name__)\n")
    assert plain.returncode == 0 and plain.stdout.strip() == "accord", plain.stderr


def accord_libraries():
    """accord's shared libraries in the package the tests import: libaccord, accord._core, accord_torch."""
    import accord

    package = os.path.dirname(accord.__file__)
    found = sorted(set(glob.glob(os.path.join(package, "**", "*.so*"), recursive=True)))
    assert any(os.path.basename(p).startswith("libaccord.so") for p in found), (
        f"no libaccord in {package}: {found}"
    )
    return [p for p in found if os.path.isfile(p) and not os.path.islink(p)]


def test_no_libstdcxx_symbols_exported():
    """A libstdc++ linked statically into an accord library stays private (CMakeLists.txt, --exclude-libs)."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm (binutils) to read the dynamic symbol tables")
    for library in accord_libraries():
        table = subprocess.run(
            [nm, "-D", "--defined-only", library], capture_output=True, text=True, timeout=60
        )
        assert table.returncode == 0, table.stderr
        # std::locale's own members are defined only by a libstdc++ (headers never instantiate them).
        exported = [line for line in table.stdout.splitlines() if " _ZNSt6locale" in line]
        assert not exported, f"{library} exports libstdc++'s std::locale: {exported[:5]}"


def test_static_libstdcxx_beside_torch():
    """With accord's link options a library with a static libstdc++ formats numbers right after torch
    loaded."""
    probe = os.environ.get("ACCORD_STATIC_LIBSTDCXX_PROBE")
    if not probe:
        pytest.skip("ACCORD_STATIC_LIBSTDCXX_PROBE is not set (the build did not make the probe library)")
    pytest.importorskip("torch")
    result = run(
        "import ctypes, torch\n"
        "import accord.torch\n"
        f"probe = ctypes.CDLL({probe!r})\n"
        "out = ctypes.create_string_buffer(64)\n"
        "n = probe.accord_probe_format(ctypes.c_long(-1234567890123), out, 64)\n"
        "print(n, out.value.decode())\n"
    )
    assert result.returncode == 0, (
        f"the probe crashed beside torch (exit {result.returncode}): {result.stderr}"
    )
    assert result.stdout.split() == ["16", "[-1234567890123]"], result.stdout
