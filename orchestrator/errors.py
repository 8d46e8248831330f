"""The one error type the CLI turns into a single clear line and a non-zero exit."""


class KeelError(Exception):
    """An expected failure whose message is meant for the operator, not a traceback."""
