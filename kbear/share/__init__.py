"""Share groups (KIP-932), routed: :class:`RoutedShareConsumer` (confluent-kafka's
``ShareConsumer``) over the clusters of its topics' routes. See
docs/guides/share-groups.md."""

from kbear.share._facade import RoutedShareConsumer

__all__ = ["RoutedShareConsumer"]
