"""An assignment fences the predecessor before the rebuild reads (docs/operations.md,
"Orchestrator identity"): the writer is made first, so a transaction the killed
orchestrator left open is aborted at once instead of holding the read for its timeout."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from orchestrator.engine.orchestrator import Orchestrator
from orchestrator.io.memory import MemoryCommandIntake, MemoryEventLog
from orchestrator.io.ports import Record
from tests.unit.memory_rig import MemoryRig


class RecordingLog(MemoryEventLog):
    """The in-memory writer, noting when it was opened and when it was read."""

    calls: list[str]

    def open(self) -> None:
        self.calls.append("open")
        super().open()

    def read(
        self, topic: str, starts: Mapping[int, int], stop: Callable[[], bool] | None = None
    ) -> Iterator[Record]:
        self.calls.append(f"read {topic}")
        return super().read(topic, starts, stop)

    def read_batches(self, topic: str, starts: Mapping[int, int], *args: Any, **kw: Any) -> Any:
        self.calls.append(f"read {topic}")
        return super().read_batches(topic, starts, *args, **kw)


def test_the_writer_is_opened_before_the_rebuild_reads_the_topics(tmp_path):
    rig = MemoryRig(tmp_path)
    rig.start("wf-1", "three_step", {"n": 2})
    rig.run()
    intake = MemoryCommandIntake(rig.broker, rig.topics.commands, "mem.orchestrator")
    log = RecordingLog(rig.broker, "mem.orchestrator.rig", intake)
    log.calls = []
    successor = Orchestrator(rig.settings, rig.app, adapters=(intake, log))
    successor.subscribe()
    assert log.calls == []  # joining needs no broker: nothing is made before an assignment
    successor.step()  # the assignment arrives with the first poll
    reads = [c for c in log.calls if c.startswith("read ")]
    assert reads, log.calls  # it rebuilt its partitions from the topics
    assert log.calls[0] == "open", log.calls
    assert len(successor.partitions) == rig.settings.partitions
