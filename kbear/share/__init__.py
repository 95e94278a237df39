"""Share groups (KIP-932), routed: :class:`RoutedShareConsumer` (confluent-kafka's
``ShareConsumer``) and :class:`RoutedDeserializingShareConsumer` (its
``DeserializingShareConsumer``) over the clusters of their topics' routes. See
docs/guides/share-groups.md."""

from kbear.share._deserializing import RoutedDeserializingShareConsumer
from kbear.share._facade import RoutedShareConsumer

__all__ = ["RoutedDeserializingShareConsumer", "RoutedShareConsumer"]
