"""Keel beside Restate on one machine, in one run: the invoice-lite workload
(``ops/peers/invoice_steps.py``: three activities and a deterministic check) on Restate,
on Keel with remote steps (a worker process) and on Keel with local steps.

Not run in CI and not part of ``keel bench``: Restate is installed outside the
repository (docs/performance.md, "Beside Restate", says how). First ``--warm-s`` seconds
of each system's own bursts, discarded (``warm_up``: the broker's JIT); then in each run,
for each system in turn, one discarded warm-up pass (the latency phase and a burst a
quarter of the size), then

* latency: ``--light`` runs one at a time, client-observed: Restate's ingress call
  ``POST /InvoiceLite/<id>/run`` until it answers with the result; Keel's
  ``KeelClient.start`` then ``wait`` (the read model), as ``keel workflow start --wait``;
* throughput: ``--burst`` runs started at once (Restate: ``--concurrency`` calls in
  flight; Keel: ``start_many``) until every result was seen by the client (Keel: the read
  model shows every run finished).

It prints one JSON object: wf/s, p50 and p99 (nearest rank) per system, Keel's CPU
milliseconds per run of each process during its burst (``cpu_ms_per_run``: orchestrator,
its projector child, worker, this driver, and the local stack's broker and Redis when
``keel infra up`` runs them), and Keel over Restate as ratios. Keel uses
``KEEL_BOOTSTRAP_SERVERS`` and ``KEEL_REDIS_URL`` (a fresh topic prefix, dropped at the
end); Restate runs on ``--port-base`` + 80 (ingress), + 70 (admin), + 122 (node), its
service on + 90, with a fresh data directory.

    python -m ops.peers.side_by_side --restate /work/peers/restate \\
        --peer-python /work/peers/venv/bin/python --port-base 25000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from ops.bench_probes import RssSampler
from ops.bench_rig import _percentile, read_model_shows, spawn_app
from ops.peers import invoice_steps
from ops.peers.keel_invoice import APP, LOCAL, REMOTE
from orchestrator.config.settings import Settings, load_settings

Log = Callable[[str], None]
ROOT = Path(__file__).resolve().parents[2]


def _local_servers(settings: Settings) -> dict[str, int]:
    """The local stack's broker and Redis processes (``keel infra up``), when it runs and
    is the one ``settings`` name: their CPU is the runs' too."""
    from ops.local import LocalStack

    status = LocalStack(settings).status()
    if not status.running or status.bootstrap_servers != settings.kafka_servers:
        return {}
    return {f"{p.role}-{p.pid}": p.pid for p in status.processes}


def _summary(latencies: list[float], rate: float) -> dict[str, float]:
    return {
        "wf_per_s": round(rate, 1),
        "p50_ms": round(statistics.median(latencies), 2),
        "p99_ms": round(_percentile(latencies, 0.99), 2),
    }


class RestatePeer:
    """A Restate server and the invoice-lite service, each a child process."""

    def __init__(self, install: Path, peer_python: Path, port_base: int, log: Log) -> None:
        self.log = log
        self.data = Path(tempfile.mkdtemp(prefix="restate-peer-"))
        self.ingress = port_base + 80
        admin, node, service = port_base + 70, port_base + 122, port_base + 90
        env = os.environ | {
            "RESTATE_BASE_DIR": str(self.data),
            "RESTATE_LISTEN_MODE": "tcp",
            "RESTATE_BIND_ADDRESS": f"127.0.0.1:{node}",
            "RESTATE_ADVERTISED_ADDRESS": f"http://127.0.0.1:{node}",
            "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{self.ingress}",
            "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{admin}",
            "RESTATE_DISABLE_TELEMETRY": "true",
            "RESTATE_ADMIN__DISABLE_WEB_UI": "true",
        }
        server = install / "node_modules" / ".bin" / "restate-server"
        out = (self.data / "server.log").open("wb")
        self.server = subprocess.Popen(
            [str(server), "--no-logo"], env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        hypercorn = peer_python.parent / "hypercorn"
        self.service = subprocess.Popen(
            [
                str(hypercorn),
                "--bind",
                f"127.0.0.1:{service}",
                "ops.peers.restate_invoice:create_app()",
            ],
            env=os.environ | {"PYTHONPATH": str(ROOT)},
            cwd=ROOT,
            stdout=(self.data / "service.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        self._register(f"http://127.0.0.1:{admin}/deployments", f"http://127.0.0.1:{service}")
        self.conn = http.client.HTTPConnection("127.0.0.1", self.ingress, timeout=60)

    def _register(self, admin_url: str, service_url: str) -> None:
        body = json.dumps({"uri": service_url, "force": True}).encode()
        deadline = time.monotonic() + 60
        while True:
            try:
                req = urllib.request.Request(
                    admin_url, body, {"content-type": "application/json"}, method="POST"
                )
                with urllib.request.urlopen(req, timeout=10) as answer:
                    answer.read()
                self.log(f"Restate: service registered ({service_url})")
                return
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Restate did not register the service: {exc}") from exc
                time.sleep(0.5)

    def call(self, wf: str, n: int) -> dict[str, Any]:
        body = json.dumps(invoice_steps.invoice_for(n))
        self.conn.request(
            "POST", f"/InvoiceLite/{wf}/run", body, {"content-type": "application/json"}
        )
        answer = self.conn.getresponse()
        data = answer.read()
        if answer.status != 200:
            raise RuntimeError(f"Restate answered {answer.status}: {data[:200]!r}")
        return dict(json.loads(data))

    def latency(self, tag: str, count: int) -> list[float]:
        out = []
        for i in range(count):
            began = time.perf_counter()
            result = self.call(f"{tag}-{i}", i)
            out.append((time.perf_counter() - began) * 1000)
            assert result["ok"], result
        return out

    def burst(self, tag: str, count: int, concurrency: int) -> float:
        async def run() -> None:
            limit = asyncio.Semaphore(concurrency)
            connector = aiohttp.TCPConnector(limit=concurrency)
            url = f"http://127.0.0.1:{self.ingress}/InvoiceLite"
            async with aiohttp.ClientSession(connector=connector) as session:

                async def one(i: int) -> None:
                    async with limit:
                        body = invoice_steps.invoice_for(i)
                        async with session.post(f"{url}/{tag}-{i}/run", json=body) as r:
                            result = await r.json(content_type=None)
                            assert r.status == 200 and result["ok"], result

                await asyncio.gather(*(one(i) for i in range(count)))

        began = time.perf_counter()
        asyncio.run(run())
        return count / (time.perf_counter() - began)

    def close(self) -> None:
        self.conn.close()
        for proc in (self.service, self.server):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        shutil.rmtree(self.data, ignore_errors=True)


class KeelPeer:
    """An orchestrator (projector child on) and a worker on a fresh prefix, and a client."""

    def __init__(self, base: Settings, log: Log) -> None:
        from ops import scratch
        from ops.peers.keel_invoice import app
        from orchestrator.client.client import KeelClient

        self.settings = scratch.fresh(base, log, "peers")
        self.home = Path(tempfile.mkdtemp(prefix="keel-peers-"))
        self.procs = [
            spawn_app("orchestrator", APP, self.settings, self.home, KEEL_INSTANCE_ID="peers"),
            spawn_app("worker", APP, self.settings, self.home),
        ]
        self.client = KeelClient(self.settings, app)
        self.sampler = RssSampler(
            {"orchestrator": self.procs[0].pid, "worker": self.procs[1].pid}
            | {"driver": os.getpid()}
            | _local_servers(base),
            children={"orchestrator": ("projector_child", "--feed-fd")},
        )
        self.sampler.start()
        #: CPU milliseconds per run of each process during the last burst.
        self.burst_cpu: dict[str, float] = {}

    def latency(self, name: str, tag: str, count: int) -> list[float]:
        out = []
        for i in range(count):
            wf = f"{tag}-{i}"
            began = time.perf_counter()
            self.client.start(name, invoice_steps.invoice_for(i), workflow_id=wf)
            summary = self.client.wait(wf, 120)
            out.append((time.perf_counter() - began) * 1000)
            assert summary.status == "completed", summary
        return out

    def burst(self, name: str, tag: str, count: int) -> float:
        ids = [f"{tag}-{i}" for i in range(count)]
        self.sampler.sample_now()
        cpu0 = self.sampler.cpu_mark()
        began = time.perf_counter()
        self.client.start_many(
            name, [(wf, invoice_steps.invoice_for(i)) for i, wf in enumerate(ids)]
        )
        ended = read_model_shows(self.client.projection, ids, 900)
        rate = count / (time.perf_counter() - began)
        self.sampler.sample_now()
        cpu = self.sampler.cpu_mark()
        self.burst_cpu = {r: round(1000 * (cpu[r] - cpu0.get(r, 0.0)) / count, 3) for r in cpu}
        wrong = sorted(wf for wf, status in ended.items() if status != "completed")
        if wrong:
            raise RuntimeError(f"{len(wrong)} Keel runs did not complete, e.g. {wrong[:3]}")
        return rate

    def close(self) -> None:
        from ops import scratch

        self.sampler.stop()
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.client.close()
        scratch.drop(self.settings)


def side_by_side(
    restate: RestatePeer, keel: KeelPeer, light: int, burst: int, concurrency: int, log: Log
) -> dict[str, Any]:
    """One run: each system warmed by a discarded pass, then measured, in turn."""
    tag = uuid.uuid4().hex[:6]
    out: dict[str, Any] = {}
    log("Restate: warm-up pass (discarded)")
    restate.latency(f"warm-{tag}", light)
    restate.burst(f"warm-burst-{tag}", max(1, burst // 4), concurrency)
    log("Restate: latency, then throughput")
    lat = restate.latency(f"lat-{tag}", light)
    out["restate"] = _summary(lat, restate.burst(f"burst-{tag}", burst, concurrency))
    for name, key in ((REMOTE, "keel_remote"), (LOCAL, "keel_local")):
        log(f"Keel {name}: warm-up pass (discarded)")
        keel.latency(name, f"warm-{key}-{tag}", light)
        keel.burst(name, f"warm-burst-{key}-{tag}", max(1, burst // 4))
        log(f"Keel {name}: latency, then throughput")
        lat = keel.latency(name, f"lat-{key}-{tag}", light)
        out[key] = _summary(lat, keel.burst(name, f"burst-{key}-{tag}", burst))
        out[key]["cpu_ms_per_run"] = keel.burst_cpu
    r = out["restate"]
    out["ratios_over_restate"] = {
        key: {
            "p50": round(out[key]["p50_ms"] / r["p50_ms"], 2),
            "p99": round(out[key]["p99_ms"] / r["p99_ms"], 2),
            "wf_per_s": round(out[key]["wf_per_s"] / r["wf_per_s"], 2),
        }
        for key in ("keel_remote", "keel_local")
    }
    return out


def warm_up(
    restate: RestatePeer, keel: KeelPeer, seconds: float, burst: int, concurrency: int, log: Log
) -> None:
    """Each system's own traffic for ``seconds`` before the first run, discarded.

    Kafka's broker is a JVM: on a fresh broker the first tens of seconds of traffic run
    partly interpreted and JIT-compiled as they go. Six back-to-back rounds of 300 light
    remote runs from a fresh broker had a p50 of 24.1, 19.6, 17.2, 16.6, 16.2 and
    16.5 ms, settled after ~40 s of traffic (docs/performance.md, "Beside Restate"). A
    production broker has run for days, so the figures compare warmed systems; Restate
    gets the same time.
    """
    tag = uuid.uuid4().hex[:6]
    small = max(1, burst // 4)
    log(f"Restate: {seconds:.0f} s of warm-up traffic (discarded)")
    began, i = time.monotonic(), 0
    while time.monotonic() - began < seconds:
        restate.burst(f"jit-{tag}-{i}", small, concurrency)
        i += 1
    log(f"Keel: {seconds:.0f} s of warm-up traffic (discarded)")
    began, i = time.monotonic(), 0
    while time.monotonic() - began < seconds:
        for name in (REMOTE, LOCAL):
            keel.burst(name, f"jit-{name}-{tag}-{i}", small)
        i += 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ops.peers.side_by_side", description=__doc__)
    parser.add_argument("--restate", type=Path, required=True, help="npm install directory")
    parser.add_argument("--peer-python", type=Path, required=True, help="venv with restate-sdk")
    parser.add_argument("--port-base", type=int, default=25000)
    parser.add_argument("--light", type=int, default=100)
    parser.add_argument("--burst", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=256, help="Restate calls in flight")
    parser.add_argument("--runs", type=int, default=1, help="consecutive runs, each printed")
    parser.add_argument(
        "--warm-s", type=float, default=60.0, help="seconds of each system's traffic first"
    )
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    settings = load_settings()
    if not settings.kafka_servers:
        raise SystemExit("set KEEL_BOOTSTRAP_SERVERS and KEEL_REDIS_URL (e.g. keel infra up)")
    with contextlib.ExitStack() as started:  # a peer that fails to start stops the other
        restate = RestatePeer(args.restate, args.peer_python, args.port_base, log)
        started.callback(restate.close)
        keel = KeelPeer(settings, log)
        started.callback(keel.close)
        warm_up(restate, keel, args.warm_s, args.burst, args.concurrency, log)
        for i in range(args.runs):
            log(f"run {i + 1}/{args.runs}")
            result = side_by_side(restate, keel, args.light, args.burst, args.concurrency, log)
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
