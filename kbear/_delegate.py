"""Public methods of a client facade that hand the call to one of its parts (private).

A facade (``RoutedConsumer``...) builds its parts and keeps each in an attribute
of its own; :func:`delegate` makes the facade's method from the part's method:
same name, signature (``inspect.signature`` follows ``__wrapped__``), docstring
and annotations, so the public API reads as if the method were the facade's,
while the code and its documentation stay with the part that does the work.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def delegate(part: str, method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
    """A method for a facade class body: ``self.<part>.<method name>(...)``.

    Args:
        part: the name of the facade's attribute holding the part (e.g. ``"_partitions"``).
        method: the part's method (the function on its class), whose name,
            signature and docstring the facade's method takes.

    Returns:
        A function to assign in the facade's class body (one attribute lookup
        and one call more than calling the part directly).
    """
    name = method.__name__

    def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = getattr(getattr(self, part), name)(*args, **kwargs)
        return result

    functools.update_wrapper(call, method)
    return call
