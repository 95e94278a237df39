"""The record headers of a chunked message (``kbear.chunking.enable``).

The producer writes them (:mod:`kbear.producer`), the consumer reads them
(:mod:`kbear.consumer`): a format both share, so it lives below both.
"""

from __future__ import annotations

__all__ = ["CHUNK_COUNT", "CHUNK_INDEX", "CHUNK_NOKEY", "CHUNK_UUID"]

#: the chunked message's id (a UUID, text), the same in every chunk
CHUNK_UUID = "kbear-chunk-uuid"
#: the chunk's place in the message, from 0 (decimal text)
CHUNK_INDEX = "kbear-chunk-index"
#: how many chunks the message has (decimal text)
CHUNK_COUNT = "kbear-chunk-count"
#: present when the message had no key (the chunks carry the UUID as key)
CHUNK_NOKEY = "kbear-chunk-nokey"
