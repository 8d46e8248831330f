"""The bench's sampler counts a role's child (the projector child) and keeps it found."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from ops.bench_probes import RssSampler

# A child that burns ~0.3 s of CPU, then sleeps; its command line holds the marker.
CHILD = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(30)"
PARENT = (
    "import subprocess, sys, time\n"
    f"subprocess.Popen([sys.executable, '-c', {CHILD!r}, '--feed-fd'])\n"
    "time.sleep(30)"
)


def test_the_child_of_a_role_is_sampled_and_remembered():
    parent = subprocess.Popen([sys.executable, "-c", PARENT])
    sampler = RssSampler({"orchestrator": parent.pid}, {"orchestrator": ("child", "--feed-fd")})
    try:
        sampler.start()
        deadline = time.monotonic() + 10
        while sampler.cpu_s["child"] < 0.25 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sampler.cpu_s["child"] >= 0.25  # its CPU, from its start
        assert sampler.peak["child"] > 0
        (child,) = psutil.Process(parent.pid).children()
        assert sampler._child["orchestrator"].pid == child.pid  # found once, kept
    finally:
        sampler.stop()
        for proc in psutil.Process(parent.pid).children():
            proc.kill()
        parent.kill()
        parent.wait(10)


def test_a_mark_taken_now_counts_cpu_used_since_the_last_sample():
    """A burst's edges are marked with ``sample_now``: not up to 100 ms of CPU late."""
    sampler = RssSampler({"driver": psutil.Process().pid})  # not started: no thread samples
    sampler.sample_now()
    before = sampler.cpu_mark()["driver"]
    began = time.process_time()
    while time.process_time() - began < 0.2:
        pass
    assert sampler.cpu_mark()["driver"] == before  # nothing sampled in between
    sampler.sample_now()
    assert sampler.cpu_mark()["driver"] - before >= 0.15  # clock ticks of 10 ms
