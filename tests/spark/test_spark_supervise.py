"""What the supervisor of connector queries reads from a stopped query's checkpoint:
the end offsets of its last committed micro-batch, as Spark's offsets log writes them."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from kbear.spark._supervise import committed_offsets


def write_batch(root: Path, batch: int, sources: list[str], committed: bool) -> None:
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "commits").mkdir(parents=True, exist_ok=True)
    metadata = '{"batchWatermarkMs":0,"batchTimestampMs":1795900000000,"conf":{}}'
    (root / "offsets" / str(batch)).write_text("\n".join(["v1", metadata, *sources]) + "\n")
    if committed:
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


def test_the_last_committed_batch_s_offsets_per_source(tmp_path: Path) -> None:
    assert committed_offsets(tmp_path) == []  # no checkpoint yet
    write_batch(tmp_path, 0, ['{"orders":{"0":10,"1":12}}', '{"payments":{"0":3}}'], committed=True)
    write_batch(tmp_path, 1, ['{"orders":{"0":20,"1":22}}', '{"payments":{"0":5}}'], committed=True)
    # planned, not committed: the query stopped during it, so it is read again
    write_batch(tmp_path, 2, ['{"orders":{"0":30,"1":32}}', '{"payments":{"0":9}}'], committed=False)
    (tmp_path / "commits" / ".1.crc").write_text("")
    assert committed_offsets(tmp_path) == [{"orders": {"0": 20, "1": 22}}, {"payments": {"0": 5}}]
