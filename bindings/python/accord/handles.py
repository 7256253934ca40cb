"""Handles of asynchronous operations."""

from typing import Any, Callable, Optional

from accord import _core

__all__ = ["Handle", "poll", "synchronize"]


class Handle:
    """An operation in flight, returned by the ``*_async`` functions.

    ``poll()`` says whether it has finished; ``wait()`` blocks until it has
    (without holding the GIL) and returns its result, or raises its error.
    The arrays involved must not be touched until ``wait()`` returns.
    """

    __slots__ = ("_core_handle", "_finish", "_result", "_done")

    def __init__(
        self,
        core_handle: "_core.Handle",
        finish: Optional[Callable[["_core.Handle"], Any]],
        result: Any = None,
    ):
        # ``finish`` builds the result once the operation has completed; an
        # operation whose result is known up front (an in-place array, an
        # output allocated before the enqueue) passes None and ``result``.
        self._core_handle = core_handle
        self._finish = finish
        self._result = result
        self._done = False

    def poll(self) -> bool:
        """True once the operation has finished, successfully or not. Never blocks."""
        return self._done or self._core_handle.poll()

    def wait(self, timeout: Optional[float] = None) -> Any:
        """Waits for the operation and returns its result.

        Args:
            timeout: seconds to wait at most; None waits as long as it takes.

        Raises:
            TimeoutError: ``timeout`` passed; the operation is still in flight.
            AccordError: the operation failed (mismatch, shutdown, failed rank).
            ValueError: the operation was invalid on this rank.
        """
        if not self._done:
            self._core_handle.wait(timeout)
            finish = self._finish
            if finish is not None:
                self._result = finish(self._core_handle)
                self._finish = None
            self._done = True
        return self._result

    @property
    def core_handle(self) -> "_core.Handle":
        """The ``accord._core.Handle`` underneath."""
        return self._core_handle


def poll(handle: Handle) -> bool:
    """Whether the operation behind ``handle`` has finished. Never blocks."""
    return handle.poll()


def synchronize(handle: Handle, timeout: Optional[float] = None) -> Any:
    """Waits for ``handle`` and returns its result (see ``Handle.wait``)."""
    return handle.wait(timeout)
