"""The core's rule that a Deferred-returning method never raises.

Every part of the broker core (`rustka.broker.core` and the parts it builds)
answers a bad argument, an unknown partition or a full disk through the
Deferred's failure, so a front-end has one error path per call, not two.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from twisted.internet import defer
from twisted.python.failure import Failure

T = TypeVar("T")


def reports_errors(f: Callable[..., defer.Deferred[T]]) -> Callable[..., defer.Deferred[T]]:
    """Make a Deferred-returning method report synchronous errors through the Deferred."""

    def wrapper(*args: Any, **kwargs: Any) -> defer.Deferred[T]:
        try:
            return f(*args, **kwargs)
        except Exception:
            return defer.fail(Failure())

    wrapper.__name__ = f.__name__
    wrapper.__doc__ = f.__doc__
    return wrapper
