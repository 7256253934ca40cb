"""How accord sits in a user's Python environment: imports in any order, and a clear error without torch.

Each case runs a fresh interpreter (the one running the tests, so on CI's second leg a venv with torch
from PyPI and accord installed by ``pip install .``).
"""
import subprocess
import sys

import pytest


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_accord_loads_no_nccl():
    """libaccord does not link NCCL: only a CUDA collective loads it, preferring the process's own."""
    result = run("import accord\n"
                 "maps = open('/proc/self/maps').read()\n"
                 "print('libnccl' in maps)\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False", "import accord loaded an NCCL library"


@pytest.mark.parametrize("order", ["accord first", "torch first"])
def test_accord_and_torch_import_in_either_order(order):
    torch_ = pytest.importorskip("torch")
    imports = "import accord\nimport torch\n" if order == "accord first" else "import torch\nimport accord\n"
    result = run(imports + "import accord.torch as hvd\n"
                 "print(torch.__version__, hvd.nccl_built() in (0, 1, True, False))\n")
    assert result.returncode == 0, f"{order}: {result.stderr}"
    assert result.stdout.split()[0] == torch_.__version__


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
