"""The bench's wait on the read model returns once every run shows ended, with each run's
status, reading rows in start order and no further than the first chunk still going."""

from __future__ import annotations

from typing import Any

from ops import bench_rig
from ops.bench_rig import read_model_shows


class _Pipe:
    def __init__(self, rows: dict[str, str], reads: list[int]) -> None:
        self.rows, self.reads = rows, reads
        self.keys: list[str] = []

    def hget(self, key: str, _field: str) -> None:
        self.keys.append(key)

    def execute(self) -> list[Any]:
        self.reads.append(len(self.keys))
        return [self.rows.get(k) for k in self.keys]


class _Projection:
    """Rows that end as they are read: run i shows ended from the (i // 3 + 1)th pipeline."""

    def __init__(self, count: int) -> None:
        self.count, self.pipelines = count, 0
        self.reads: list[int] = []
        self.r = self

    def k_wf(self, wf: str) -> str:
        return wf

    def pipeline(self, transaction: bool) -> _Pipe:
        self.pipelines += 1
        rows = {
            f"wf-{i}": "failed" if i == 4 else "completed"
            for i in range(self.count)
            if i // 3 < self.pipelines
        }
        return _Pipe(rows, self.reads)


def test_every_run_is_waited_for_in_chunks(monkeypatch: Any) -> None:
    monkeypatch.setattr(bench_rig, "READ_MODEL_CHUNK", 2)
    monkeypatch.setattr(bench_rig.time, "sleep", lambda _s: None)
    projection = _Projection(7)
    ended = read_model_shows(projection, [f"wf-{i}" for i in range(7)], 10)
    assert ended == {f"wf-{i}": "failed" if i == 4 else "completed" for i in range(7)}
    assert max(projection.reads) == 2  # never more than a chunk per pipeline
    assert sum(projection.reads) < 7 * 3  # stops at the first chunk still going
