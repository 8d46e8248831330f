"""Secrets out of every line Keel prints or logs, in time linear in the line's length.

:func:`redact` runs on every log line, CLI error and settings error, and those lines carry
untrusted text (a request's path, a workflow id of any length). A backtracking regex such
as ``[^\\s:/@]*:[^\\s/]*@`` rescans the rest of a long token from every position it starts
at: quadratic, 0.9 s for an 8,000-character path, which stalled the connector (issue 44).
So no pattern here can backtrack: each is either one character class repeated (a token:
nothing follows the repetition to backtrack into) or a fixed literal; whatever follows a
match is scanned by hand, once. :func:`clip` bounds what a line quotes in the first place.
"""

from __future__ import annotations

import re

__all__ = ["MAX_QUOTED_CHARS", "clip", "mask_servers", "redact"]

#: The most characters of one untrusted value (a path, an id) a log or error line quotes.
MAX_QUOTED_CHARS = 200
_MASK = "***"

#: A run of characters a URL's or a host list's userinfo may hold (it ends at a space,
#: ``/`` or ``,``).
_TOKEN = re.compile(r"[^\s/,]+")
#: A key whose value is a password in a query string (``?password=...``, a Sentinel URL's
#: ``?sentinel_password=...``).
_QUERY_KEY = re.compile(r"(?i)[?&;](?:sentinel_password|password|passwd|pass|secret|token)=")
#: A Kafka client's password property (``sasl.password``, or in a config dict's repr) and
#: the variable that carries it.
_PROPERTY_KEY = re.compile(
    r"(?i)\b(?:sasl|ssl\.key|ssl\.keystore|ssl\.truststore)\.password|KEEL_KAFKA_SASL_PASSWORD="
)
#: A query or property value ends at these (or at a space).
_QUERY_END = "&"
_PROPERTY_END = ",;}"
#: A userinfo of the ``user:password`` form: ``:`` or its percent-encoding.
_SEPARATORS = (":", "%3a", "%3A")
#: What may open a bare ``secret@host:port`` (``KEEL_X=`` or a quote), kept in sight.
_OPENERS = "='\"([<"


def redact(text: str) -> str:
    """``text`` with every password in a URL, a host list or a Kafka client property
    (``sasl.password``, ``KEEL_KAFKA_SASL_PASSWORD=``) replaced by ``***``.

    Applied to every message Keel prints or logs (settings errors, CLI errors, the JSON
    logs), so ``KEEL_REDIS_URL=redis://:s3cret@host`` never reaches a terminal or a file.
    A userinfo is masked in each form: ``user:pass@`` and ``user%3Apass@`` keep the user,
    and a bare ``secret@`` is masked whole after ``scheme://`` or before a ``host:port``.
    """
    if "@" in text:
        text = _TOKEN.sub(_mask_userinfo, text)
    text = _mask_values(text, _PROPERTY_KEY, _PROPERTY_END, assigned=True)
    return _mask_values(text, _QUERY_KEY, _QUERY_END, assigned=False)


def mask_servers(servers: str) -> str:
    """A bootstrap address with everything before each server's last ``@`` masked: Kafka
    takes no credentials there, so whatever stands before one is one."""
    return ",".join(
        f"{_MASK}@{server.rpartition('@')[2]}" if "@" in server else server
        for server in servers.split(",")
    )


def clip(value: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """``value`` cut to ``limit`` characters, saying how long it was, so a line that quotes
    an untrusted value stays short whatever the value's length."""
    if len(value) <= limit:
        return value
    return f"{value[:limit]}... ({len(value):,} characters)"


def _mask_userinfo(token: re.Match[str]) -> str:
    """One token with the userinfo before its last ``@`` masked, when it is a credential."""
    word = token.group()
    at = word.rfind("@")
    if at < 0:
        return word
    userinfo, host = word[:at], word[at + 1 :]
    cut = min((i for i in (userinfo.find(s) for s in _SEPARATORS) if i >= 0), default=-1)
    if cut >= 0 and "@" not in userinfo[:cut]:  # user:password: the user stays
        sep = ":" if userinfo[cut] == ":" else userinfo[cut : cut + 3]
        return f"{userinfo[:cut]}{sep}{_MASK}@{host}"
    after_scheme = token.string.endswith("://", 0, token.start())
    if after_scheme or _is_host_port(host):
        first = len(userinfo) if after_scheme else _first_opener(userinfo)
        keep = first + 1 if first < len(userinfo) else 0  # ``KEEL_X=`` or a quote stays
        return f"{userinfo[:keep]}{_MASK}@{host}"
    return word


def _first_opener(userinfo: str) -> int:
    """Where the first of ``_OPENERS`` is in ``userinfo`` (its length if none)."""
    return min((i for i in (userinfo.find(c) for c in _OPENERS) if i >= 0), default=len(userinfo))


def _is_host_port(text: str) -> bool:
    host, sep, port = text.partition(":")
    digits = port[: len(port) - len(port.lstrip("0123456789"))]
    return bool(sep and host and digits)


def _mask_values(text: str, key: re.Pattern[str], ends: str, *, assigned: bool) -> str:
    """``text`` with the value after each match of ``key`` masked.

    ``assigned``: the key is followed by an optional quote, spaces, ``:`` or ``=`` and
    spaces before its value (a property); else the value follows the key at once. A value
    in quotes ends at its closing quote, else at a space or one of ``ends``.
    """
    out: list[str] = []
    done = 0  # text[:done] is in out
    search_from = 0
    unclosed: set[str] = set()  # quotes with no closing one further on: never looked up again
    while (match := key.search(text, search_from)) is not None:
        pos = match.end()
        if assigned and not match.group().endswith("="):  # ``VAR=`` has its value next
            if pos < len(text) and text[pos] in "'\"":
                pos += 1
            pos = _skip_spaces(text, pos)
            if pos >= len(text) or text[pos] not in ":=":
                search_from = max(pos, match.end())
                continue
            pos = _skip_spaces(text, pos + 1)
        quote = text[pos] if pos < len(text) and text[pos] in "'\"" else ""
        end = -1
        if quote and quote not in unclosed:
            end = text.find(quote, pos + 1)
            if end < 0:
                unclosed.add(quote)
        if end >= 0:
            out.append(f"{text[done:pos]}{quote}{_MASK}{quote}")
            done = search_from = end + 1
            continue
        end = pos
        while end < len(text) and not text[end].isspace() and text[end] not in ends:
            end += 1
        out.append(f"{text[done:pos]}{_MASK}")
        done = search_from = end
    out.append(text[done:])
    return "".join(out)


def _skip_spaces(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos
