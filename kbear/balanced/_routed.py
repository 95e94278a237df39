"""The routed consumer under a ClientBalancedConsumer: a manual assignment that
follows route changes through the switch engine (kbear/consumer/_assigned.py).

:class:`AssignedConsumer` is a :class:`~kbear.RoutedConsumer` whose balanced
topics are routed and listed in its subscription state (kind ``ASSIGNED``, set
by the owner, even for topics with no partition here) and which never
subscribes: partitions are added and removed with ``incremental_assign`` /
``incremental_unassign``. ``switched_hook`` tells the owner which partitions
moved.
"""

from __future__ import annotations

from collections.abc import Callable

from kbear._route import Route
from kbear.consumer import RoutedConsumer

#: ``hook(topic, old, new, partitions)``: the partitions (numbers) of logical
#: ``topic`` moved from ``old``'s cluster to ``new``'s (None: the topic lost its route).
SwitchedHook = Callable[[str, Route, Route | None, list[int]], None]


class AssignedConsumer(RoutedConsumer):
    """A RoutedConsumer reading assigned partitions of routed topics (see the module docstring)."""

    switched_hook: SwitchedHook | None = None

    def _assigned_switched(self, topic: str, old: Route, new: Route | None, moved: list[int]) -> None:
        if self.switched_hook is not None:
            self.switched_hook(topic, old, new, moved)
