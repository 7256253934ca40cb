"""Reduction ops.

The values are Horovod's (``horovod.torch.Average == 0`` and so on), and
``accord.torch`` uses the same ones, so constants can be mixed between the two
modules and code that stores or compares them keeps working.
"""

from accord import _core
from accord._core import RequestError

Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

_CORE_OPS = {
    Average: _core.OP_AVERAGE,
    Sum: _core.OP_SUM,
    Min: _core.OP_MIN,
    Max: _core.OP_MAX,
    Product: _core.OP_PRODUCT,
    Adasum: _core.OP_ADASUM,
}
_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}

__all__ = ["Average", "Sum", "Adasum", "Min", "Max", "Product", "op_name"]


def op_name(op: int) -> str:
    """The name of a reduction op constant (``"Average"``, ``"Sum"``, ...)."""
    return _NAMES.get(op, repr(op))


def core_op(op: int) -> int:
    """The ``accord._core`` op for ``op``.

    Raises:
        ValueError: ``op`` is not one of the constants.
    """
    try:
        return _CORE_OPS[op]
    except (KeyError, TypeError):
        raise RequestError(
            f"unknown reduction op {op!r}; use Average, Sum, Adasum, Min, Max or Product"
        ) from None
