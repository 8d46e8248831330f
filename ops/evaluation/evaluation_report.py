"""``keel evaluate``'s findings: the metrics of each fault class, its verdict, and the
report files (docs/evaluation.md, "The report").

Every number comes from a batch's histories (:mod:`ops.evaluation.run_evidence`) and the
fakes' own books. A class passes when every run ended as the fault-free batch's run of
the same input says (or as the class expects where it must differ), no effect was made
twice, no completed activity ran again, every run went the fault-free run's way, every
history keeps the invariants, and the fault is proven to have hit in-flight work.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from ops.bench_rig import _percentile
from ops.evaluation.fault_batch import BatchResult
from ops.evaluation.fault_plans import FaultClass
from ops.evaluation.run_evidence import RunEvidence
from ops.invoices.invoice_report import duplicate_effects

__all__ = ["class_metrics", "write_report"]


def _dist(values: list[float]) -> dict[str, float]:
    """n, mean, nearest-rank p50 and p95 (``keel bench``'s), and max of ``values``."""
    if not values:
        return {"n": 0, "mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0}
    return {
        "n": len(values),
        "mean": round(statistics.fmean(values), 3),
        "p50": round(_percentile(values, 0.5), 3),
        "p95": round(_percentile(values, 0.95), 3),
        "max": round(max(values), 3),
    }


def _duplicates(batch: BatchResult) -> int | None:
    """Effects made twice (the books' own count), and postings past one per invoice; for
    a workflow of your own, its ``@side_effect`` handlers' (``fault_app``'s book)."""
    books = batch.books
    if books is None:
        return batch.effects_twice
    per_run = Counter(p["extra"].get("invoice_id") for p in books.ledger["postings"])
    return duplicate_effects(books) + sum(n - 1 for n in per_run.values() if n > 1)


def _hits(batch: BatchResult) -> tuple[int, int, str]:
    """How many runs the fault hit in flight, from their histories' timestamps; how often
    it fired, from the batch and the fakes' books; and what the first counts."""
    runs = batch.evidence.values()
    match batch.fault:
        case FaultClass.CRASH:
            at = batch.killed_ms
            n = 0 if at is None else sum(ev.in_flight_at(at) for ev in runs)
            how = "runs started and not ended when the orchestrator and the worker died"
            return n, int(at is not None), how
        case FaultClass.RESPONSE_LOSS:
            n = sum(ev.unknown > 0 for ev in runs)
            return n, batch.answers_dropped, "runs with an unknown outcome recorded"
        case FaultClass.DUPLICATE_CALLBACKS:
            firsts: dict[str, int] = {}
            again: set[str] = set()
            for wf, ms, _ in sorted(batch.deliveries, key=lambda d: d[1]):
                ev = batch.evidence.get(wf)
                if wf in firsts and ev is not None and (not ev.ended or ms < ev.ended_ms):
                    again.add(wf)
                firsts.setdefault(wf, ms)
            repeated = len(batch.deliveries) - len(firsts) + batch.decisions_repeated
            return len(again), repeated, "runs delivered again before they ended"
        case FaultClass.QUEUE_FULL:
            down = batch.outage_ms
            if down is None:
                return 0, 0, "runs that waited for a retry while the downstream was down"
            end = down[1] or 2**62
            n = sum(any(a < end and b > down[0] for a, b in ev.retry_waits) for ev in runs)
            return n, 1, "runs that waited for a retry while the downstream was down"
        case FaultClass.OLD_SCHEMA:
            at, v = batch.deployed_ms, batch.from_version
            n = (
                0
                if at is None
                else sum(ev.in_flight_at(at) and ev.versions[:1] == [v] for ev in runs)
            )
            return n, int(at is not None), f"runs of v{v} in flight when v{v + 1} was deployed"
        case FaultClass.COMPENSATION_FAILURE:
            n = sum(ev.compensations_failed > 0 for ev in runs)
            books = batch.books
            fired = (
                batch.compensations_refused if books is None else books.ledger["reversal_failures"]
            )
            return n, fired, "runs whose compensation failed"
    return 0, 0, "no fault injected"


def backlog(batch: BatchResult, step_ms: int = 250) -> dict[str, Any]:
    """Runs waiting for a retry over the batch, from their histories: its peak, and
    the series (seconds since the first run started, runs waiting); beside it, Kafka's
    consumer lag over the same time."""
    evs = [ev for ev in batch.evidence.values() if ev.started_ms]
    waits = [w for ev in evs for w in ev.retry_waits]
    if not evs:
        return {"peak": 0, "series": [], "kafka_lag": _kafka_lag(batch, 0)}
    first = min(ev.started_ms for ev in evs)
    last = max(ev.ended_ms or ev.started_ms for ev in evs)
    series = []
    for t in range(first, last + step_ms, step_ms):
        series.append([round((t - first) / 1000, 2), sum(a <= t < b for a, b in waits)])
    out: dict[str, Any] = {"peak": max(n for _, n in series), "series": series}
    out["kafka_lag"] = _kafka_lag(batch, first)
    if batch.outage_ms is not None and batch.outage_ms[1]:
        up = batch.outage_ms[1]
        drained = max((b for a, b in waits if a <= up), default=up)
        out["outage_s"] = round((up - batch.outage_ms[0]) / 1000, 2)
        out["drained_s_after_outage"] = round(max(0, drained - up) / 1000, 2)
    return out


def _kafka_lag(batch: BatchResult, first_ms: int) -> dict[str, Any]:
    """Kafka's consumer lag over the batch (``lag_sampler``): its peak per topic and
    group, and the series (seconds since the first run started, records by topic and
    group) from the first run's start on."""
    kept = [(ms, lag) for ms, lag in batch.kafka_lag if ms >= first_ms]
    names = sorted({n for _, lag in kept for n in lag})
    series = [
        [round((ms - first_ms) / 1000, 2), {n: lag.get(n, 0) for n in names}] for ms, lag in kept
    ]
    peak = {n: max(lag.get(n, 0) for _, lag in kept) for n in names}
    return {"peak": peak, "series": series}


def class_metrics(batch: BatchResult, baseline: BatchResult | None) -> dict[str, Any]:
    """The metrics and the verdict of one fault class (``baseline``: the fault-free batch)."""
    evs = batch.evidence
    ok = {wf for wf, ev in evs.items() if ev.outcome == batch.expected[wf]}
    states: dict[str, list[float]] = {}
    activities: dict[str, list[float]] = {}
    for ev in evs.values():
        for state, s in ev.state_s.items():
            states.setdefault(state, []).append(s)
        for kind, times in ev.activity_s.items():
            activities.setdefault(kind, []).extend(times)
    human = [h for ev in evs.values() for h in ev.human]
    cost = sum(ev.cost_usd for ev in evs.values())
    retries: Counter[str] = Counter()
    for ev in evs.values():
        retries.update(ev.retries)
    hit, fired, hit_how = _hits(batch)
    courses = _courses(batch, baseline)
    failed_runs = [_failed(batch, wf, ev, baseline, courses) for wf, ev in evs.items()]
    failures = [f for f in failed_runs if f is not None]
    recovery = _recovery(batch, courses)
    compensated = sum(ev.compensations > 0 for ev in evs.values())
    wrong = [ev for wf, ev in evs.items() if wf not in ok]
    metrics: dict[str, Any] = {
        "variant": batch.variant,
        "workflow": batch.workflow,
        "fault": str(batch.fault),
        "what": batch.plan.what,
        "prefix": batch.prefix,
        "runs": len(evs),
        "ended": sum(ev.ended for ev in evs.values()),
        "succeeded": len(ok),
        "success_rate": round(len(ok) / len(evs), 3) if evs else 0.0,
        "outcomes": dict(Counter(ev.outcome for ev in evs.values())),
        "wrong_outcomes": len(wrong),
        "diagnosable_wrong_outcomes": sum(ev.diagnosable for ev in wrong),
        "node_failures": sum(retries.values()),
        "retries_by_class": dict(retries),
        "attempts": sum(ev.attempts for ev in evs.values()),
        "duplicate_effects": _duplicates(batch),
        "calls_repeated_same_key": batch.calls_repeated,
        "re_executed_activities": sum(len(ev.re_executed) for ev in evs.values()),
        "unknown_outcomes": sum(ev.unknown for ev in evs.values()),
        "settled_by_status_query": sum(ev.settled_by_query for ev in evs.values()),
        "compensations": compensated,
        "compensations_failed": sum(ev.compensations_failed > 0 for ev in evs.values()),
        "compensation_success_rate": (
            round(sum(ev.outcome == "compensated" for ev in evs.values()) / compensated, 3)
            if compensated
            else None
        ),
        "end_to_end_s": _dist([ev.duration_s for ev in evs.values() if ev.ended]),
        "end_to_end_runs_s": sorted(round(ev.duration_s, 3) for ev in evs.values() if ev.ended),
        "wait_per_state_s": {k: _dist(v) for k, v in sorted(states.items())},
        "execution_per_activity_s": {k: _dist(v) for k, v in sorted(activities.items())},
        "model_calls": sum(ev.model_calls for ev in evs.values()),
        "tokens": sum(ev.tokens for ev in evs.values()),
        "cost_usd": round(cost, 6),
        "cost_per_successful_task_usd": round(cost / len(ok), 6) if ok else None,
        "human_tasks": len(human),
        "human_wait_s": _dist([w for w, _, _ in human]),
        "human_sla_breaches": sum(b for _, _, b in human),
        "queue_backlog": backlog(batch),
        "fault_hits": hit,
        "fault_fired": fired,
        "fault_at_ms": batch.killed_ms,
        "fault_hits_are": hit_how,
        "recovery": recovery,
        "versions": {
            "started_on": dict(Counter(str(ev.versions[0]) for ev in evs.values() if ev.versions)),
            "migrated": sum(len(ev.versions) > 1 for ev in evs.values()),
            "ended_on": dict(Counter(str(ev.versions[-1]) for ev in evs.values() if ev.versions)),
            "migrations_answered": batch.migrations,
        },
        "deliveries": len(batch.deliveries),
        "decisions_sent": batch.decisions_sent,
        "decisions_repeated": batch.decisions_repeated,
        "driver_actions": dict(sorted(batch.driver_actions.items())),
        "driver_refusals": batch.desk_problems[:10],
        "history_violations": sum(len(ev.violations) for ev in evs.values()),
        "failed_runs": failures,
        "took_s": round(batch.took_s, 1),
    }
    reasons = _verdict(batch, metrics)
    metrics["verdict"] = "pass" if not reasons else "fail"
    metrics["verdict_reasons"] = reasons
    return metrics


def _courses(batch: BatchResult, baseline: BatchResult | None) -> dict[str, str]:
    """How each run that ended went otherwise than the fault-free run of its input
    (``RunEvidence.differs_from``; "" when it went the same way), by workflow id."""
    if baseline is None:
        return {}
    return {
        wf: ev.differs_from(baseline.evidence[batch.baseline_id(wf)])
        for wf, ev in batch.evidence.items()
        if ev.ended and batch.baseline_id(wf) in baseline.evidence
    }


def _failed(
    batch: BatchResult,
    wf: str,
    ev: RunEvidence,
    baseline: BatchResult | None,
    courses: dict[str, str],
) -> dict[str, Any] | None:
    """A run that failed the class: where it stopped and why, and how to look at it."""
    problems = []
    if not ev.ended:
        problems.append(f"did not end (stopped in '{ev.stopped_at}')")
    elif ev.outcome != batch.expected[wf]:
        problems.append(f"ended {ev.outcome}, expected {batch.expected[wf]}")
    if ev.re_executed:
        problems.append(f"re-executed {', '.join(ev.re_executed)}")
    same_end = (
        baseline is not None and baseline.expected.get(batch.baseline_id(wf)) == batch.expected[wf]
    )
    if same_end and (diff := courses.get(wf)):
        problems.append(f"went another way than without the fault: {diff}")
    problems += ev.violations[:3]
    if not problems:
        return None
    return {
        "workflow_id": wf,
        "scenario": batch.scenarios[wf],
        "stopped_at": ev.stopped_at,
        "reason": ev.reason,
        "last_failure": ev.last_failure,
        "diagnosable": ev.diagnosable,
        "problems": problems,
        "show": (f"KEEL_TOPIC_PREFIX={batch.prefix} keel workflow show {wf} --app {batch.app}"),
    }


def _recovery(batch: BatchResult, courses: dict[str, str]) -> list[dict[str, Any]]:
    """After a crash, each run in flight: the node it was at, and whether it went on from
    there (the fault-free run's way, with no completed activity run again)."""
    at = batch.killed_ms
    if at is None:
        return []
    out = []
    for wf, ev in batch.evidence.items():
        if not ev.in_flight_at(at):
            continue
        after = [s for ms, s in ev.path if ms > at]
        differs = courses.get(wf, "")
        out.append(
            {
                "workflow_id": wf,
                "node_at_fault": ev.node_at(at),
                "states_after": after,
                "recovered_at_node": not ev.re_executed and not differs,
                "re_executed": ev.re_executed,
                "differs": differs,
            }
        )
    return out


def _verdict(batch: BatchResult, m: dict[str, Any]) -> list[str]:
    reasons = []
    if m["ended"] < m["runs"]:
        reasons.append(f"{m['runs'] - m['ended']} run(s) did not end")
    if m["succeeded"] < m["runs"]:
        reasons.append(f"{m['runs'] - m['succeeded']} run(s) ended otherwise than expected")
    if m["duplicate_effects"]:
        reasons.append(f"{m['duplicate_effects']} duplicate effect(s) in the fakes' books")
    if m["re_executed_activities"]:
        reasons.append(f"{m['re_executed_activities']} completed activity(ies) ran again")
    if any(not r["recovered_at_node"] for r in m["recovery"]):
        reasons.append("a run did not go on from the node it was at")
    if m["failed_runs"] and not reasons:
        reasons.append(f"{len(m['failed_runs'])} run(s) went another way than without the fault")
    if m["history_violations"]:
        reasons.append(f"{m['history_violations']} history invariant violation(s)")
    if batch.desk_problems:
        n = len(batch.desk_problems)
        if batch.books is None:  # a workflow of your own: its driver's answers
            reasons.append(f"Keel refused {n} answer(s) of the driver: {batch.desk_problems[0]}")
        else:
            reasons.append(f"the task desk refused {n} decision(s)")
    if batch.fault is not FaultClass.NONE and not m["fault_hits"]:
        if m["fault_fired"]:
            reasons.append(
                f"the fault fired {m['fault_fired']} time(s) (the fakes' books, the batch), "
                "but no run's history shows it: where it struck cannot be named"
            )
        else:
            reasons.append("the fault hit no run in flight: nothing was proven")
    return reasons


def write_report(out: Path, classes: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    """``report.json``, the plots and ``report.html`` in ``out``; the HTML's path."""
    from ops.evaluation.report_plots import plot_all

    out.mkdir(parents=True, exist_ok=True)
    judged = [c for c in classes if c["variant"] == meta["judged"]]
    report = {**meta, "classes": classes, "verdict": _overall(judged)}
    (out / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    plots = plot_all(out, classes)
    html = _render(report, plots)
    (out / "report.html").write_text(html)
    return out / "report.html"


def _overall(classes: list[dict[str, Any]]) -> str:
    return "pass" if all(c["verdict"] == "pass" for c in classes) else "fail"


def _render(report: dict[str, Any], plots: dict[str, str]) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).resolve().parent),
        autoescape=jinja2.select_autoescape(default=True),
    )
    return env.get_template("report.html.j2").render(report=report, plots=plots)
