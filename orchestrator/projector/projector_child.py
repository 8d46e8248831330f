"""The projector of ``keel orchestrator`` (by default): a child process, supervised.

:class:`ProjectorChild` is the loop a :class:`~orchestrator.runtime.supervisor.Supervisor`
runs in the orchestrator: it starts ``keel projector --feed-fd N`` with a fresh pipe,
attaches the pipe to the orchestrator's :class:`~orchestrator.io.handoff.committed_pipe.
PipePublisher` and waits. A child that exits on its own is an error, so the supervisor
starts another after its backoff; what was committed meanwhile the new child reads from
``keel.events``. On stop the pipe is detached (the child reads its end of file and
stops) and the child is waited for, then terminated, then killed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import threading
from typing import Any

from orchestrator.io.handoff.committed_pipe import PipePublisher

__all__ = ["ProjectorChild"]

#: ``fcntl`` command that sets a pipe's capacity (Linux).
_F_SETPIPE_SZ = 1031
#: The pipe's capacity asked for: a few hundred transactions in flight.
PIPE_BYTES = 1 << 20
#: How long a stopping child may take to end before it is terminated, then killed.
STOP_WAIT_S = 10.0


class ProjectorChild:
    """Starts, watches and stops one ``keel projector --feed-fd`` child at a time."""

    def __init__(self, app_spec: str, publisher: PipePublisher) -> None:
        self.app_spec = app_spec
        self.publisher = publisher
        self._stop = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self.started = 0

    def run(self) -> None:
        read_end, write_end = os.pipe()
        with contextlib.suppress(OSError):  # capped by /proc/sys/fs/pipe-max-size: fine
            fcntl.fcntl(write_end, _F_SETPIPE_SZ, PIPE_BYTES)
        args = [sys.executable, "-m", "orchestrator", "projector", "--app", self.app_spec]
        try:
            proc = subprocess.Popen([*args, "--feed-fd", str(read_end)], pass_fds=(read_end,))
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        self._proc = proc
        self.started += 1
        self.publisher.attach(write_end)
        try:
            while not self._stop.wait(0.2):
                code = proc.poll()
                if code is not None:
                    raise RuntimeError(f"the projector child (pid {proc.pid}) exited with {code}")
        finally:
            self.publisher.detach()
            self._end(proc)

    def stop(self) -> None:
        self._stop.set()

    def _end(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            proc.wait(STOP_WAIT_S)  # its end of file reaches it once the writer closes
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def health(self) -> dict[str, Any]:
        """Merged into the supervisor's health in the orchestrator's status."""
        return {
            "pid": self.pid,
            "children_started": self.started,
            "published": self.publisher.published,
            "dropped": self.publisher.dropped,
        }
