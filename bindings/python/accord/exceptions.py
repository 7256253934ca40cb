"""Exceptions raised by accord.

``AccordError`` (also available as ``HorovodInternalError``) is a
``RuntimeError``: a collective failed, the ranks disagreed about it (dtype,
shape, op, root rank, a name submitted twice), a rank failed, its process set
was removed, or accord was shut down. Its message names the tensor and the
ranks involved, and its ``code`` attribute holds the core's status code
(``"MISMATCH"``, ``"SHUT_DOWN"``, ``"ABORTED"``, ``"INTERNAL"``).

A request refused when it is made (an invalid argument, a name already in
flight on this rank, an operation the collective does not support, a call
before ``init()``) raises ``RequestError``: a ``ValueError`` that is also a
``RuntimeError``, since Horovod raises either for such requests and code
written for it catches the one it raises. A wait that runs out of time
raises ``TimeoutError``, and a feature this build lacks raises
``NotImplementedError``.
"""

from accord._core import AccordError, RequestError

HorovodInternalError = AccordError

__all__ = ["AccordError", "HorovodInternalError", "RequestError"]
