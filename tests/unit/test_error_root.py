"""One error root: every exception class of the product is a ``KeelError`` (the CLI prints
it in one line, services log it without a traceback), but for the control-flow signals
below, which must never be caught as an error on their way (issue 30, item 3)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from orchestrator.domain.model.errors import KeelError

#: Signals, each caught by its one receiver and turned into something else; a broad
#: ``except KeelError`` on their way (the domain's, a CLI's) must not swallow them.
CONTROL_FLOW = {
    # the fast Avro compiler meets a schema it does not compile: fastavro instead
    "orchestrator.payload_schemas.codec_fast._Unsupported",
    "orchestrator.payload_schemas.codec_fast.Unsupported",
    # a value that does not fit its payload schema stays JSON only (no typed payload)
    "orchestrator.payload_schemas.binary.Mismatch",
    # the decider's own: a definition function failed / the run hit a limit / a recorded
    # value this code cannot read; each becomes the run's failure or needs_attention event
    "orchestrator.domain.lifecycle.activities.UserCodeFailed",
    "orchestrator.domain.lifecycle.activities.RunNeedsAttention",
    "orchestrator.domain.authoring.upcasting.SchemaUnreadable",
    # the read model's store tells the projector to reload rows or its cache, then retry
    "orchestrator.io.ports.SeqConflict",
    "orchestrator.io.ports.EpochChanged",
    # an attempt the effect store knows is stale never runs; its report is ignored
    "handlers.execution.SupersededAttempt",
    # a rate-limited start that lapsed before its call: the worker reports it throttled
    "handlers.type_limits.StartLapsed",
}


def _exception_classes() -> dict[str, type[BaseException]]:
    found = {}
    for top in ("orchestrator", "handlers", "connectors", "ops"):
        package = importlib.import_module(top)
        for info in pkgutil.walk_packages(package.__path__, f"{top}."):
            if ".examples" in info.name or info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            for name, obj in vars(module).items():
                if (
                    inspect.isclass(obj)
                    and issubclass(obj, BaseException)
                    and obj.__module__ == module.__name__
                ):
                    found[f"{module.__name__}.{name}"] = obj
    return found


def test_every_error_of_the_product_is_a_keel_error() -> None:
    classes = _exception_classes()
    assert "handlers.sdk.activity_errors.ActivityError" in classes
    outside = {name for name, cls in classes.items() if not issubclass(cls, KeelError)}
    assert outside == CONTROL_FLOW


def test_the_activity_errors_and_decode_errors_are_keel_errors() -> None:
    from handlers.sdk.activity_errors import ActivityError, PermanentError, TransientError, classify
    from orchestrator.domain.model.vocabulary import FailureClass
    from orchestrator.payload_schemas.codec import DecodeError

    assert issubclass(ActivityError, KeelError)
    assert issubclass(DecodeError, KeelError) and issubclass(DecodeError, ValueError)
    assert classify(TransientError("x")) is FailureClass.TRANSIENT
    assert classify(PermanentError("x")) is FailureClass.PERMANENT
    assert classify(KeelError("x")) is FailureClass.TRANSIENT  # as any other exception
