"""Imported by ``accord.torch`` before any module that needs torch: without PyTorch, one line that
says what to do.

accord itself (``import accord``: numpy and any DLPack framework) needs no torch; ``accord.torch``
does, and PyTorch is not a hard dependency of the package (``pip install accord[torch]`` brings
it). Python's own error would be a bare ``No module named 'torch'`` from deep inside the adapter.
"""

import sys

try:
    import torch  # noqa: F401
except ImportError as error:
    raise ModuleNotFoundError(
        f"accord.torch needs PyTorch, which this Python ({sys.executable}) cannot import ({error}): "
        'install it with `pip install torch` (or install accord with `pip install "accord[torch]"`)',
        name="torch",
    ) from None
