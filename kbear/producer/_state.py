"""What several parts of one RoutedProducer read and write (private).

:class:`ProducerState` is the one object the facade shares with the parts that
need it (route table binding, reload applier, transactions), as aiokafka hands
one ``SubscriptionState`` to its fetcher and coordinator: no part reads another
part's attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class ProducerState:
    """The flags of one RoutedProducer.

    Attributes:
        features: ``kbear.delay.enable`` or ``kbear.chunking.enable``: produce()
            prepares each call (never a fast path). Fixed at construction.
        pending: a configuration reload waits to be applied (set by the
            reloading thread, cleared by the caller's thread that applies it).
        txn_open: a transaction is open (produce() joins it: no fast path).
        closed: ``close()`` ran.
        failed: the clusters this producer failed over itself
            (``kbear.failover.enable``, :mod:`kbear.producer._failover`): their
            routes go to their standby.
    """

    features: bool = False
    pending: bool = False
    txn_open: bool = False
    closed: bool = False
    failed: set[str] = field(default_factory=set)

    def fast_path_allowed(self) -> bool:
        """Whether produce() may skip kbear's checks (nothing pending, no transaction,
        open, no per-call features)."""
        return not (self.pending or self.txn_open or self.closed or self.features)
