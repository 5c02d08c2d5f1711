"""The rules a setting's text must follow: each parser returns the typed value or raises
``ValueError`` with the rule, which :func:`modelops.config.load_settings` turns into a
:class:`~modelops.errors.ConfigError` naming the variable, the rule and an example.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""The repository root (``plugins/modelops/config_rules.py`` lives two levels below it)."""


def port(raw: str) -> int:
    value = int(raw)
    if not 1 <= value <= 65535:
        raise ValueError("must be a TCP port between 1 and 65535")
    return value


def positive_int(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise ValueError("must be an integer >= 1")
    return value


def non_negative_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError("must be an integer >= 0")
    return value


def positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0:
        raise ValueError("must be a number > 0")
    return value


def fraction(raw: str) -> float:
    value = float(raw)
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be a number between 0 and 1")
    return value


def boolean(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError("must be one of true/false/1/0/yes/no/on/off")


def path(raw: str) -> Path:
    if not raw.strip():
        raise ValueError("must not be empty")
    path = Path(raw).expanduser()
    return path if path.is_absolute() else (PROJECT_ROOT / path)


def memory_size(raw: str) -> str:
    """A JVM memory size as Spark reads it (``spark.driver.memory``): digits and a unit k, m, g or t."""
    value = raw.strip().lower()
    if not (value[:-1].isdigit() and value[-1:] in {"k", "m", "g", "t"} and int(value[:-1]) > 0):
        raise ValueError("must be a memory size: a whole number > 0 and a unit k, m, g or t")
    return value


def non_negative_float(raw: str) -> float:
    value = float(raw)
    if not value >= 0:
        raise ValueError("must be a number >= 0")
    return value


def regex(raw: str) -> str:
    try:
        re.compile(raw)
    except re.error as exc:
        raise ValueError(f"must be a regular expression ({exc})") from None
    return raw


def host(raw: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9.\-:]+", raw):
        raise ValueError("must be a host name or IP address")
    return raw


def choice(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return raw

    parse.__name__ = "one of " + "|".join(choices)
    return parse


def bucket(raw: str) -> str:
    if not re.fullmatch(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]", raw):
        raise ValueError("must be an S3 bucket name (3-63 of a-z 0-9 . -)")
    return raw


def text(raw: str) -> str:
    return raw


def optional_url(raw: str) -> str:
    if raw and not re.match(r"^[a-z][a-z0-9+.\-]*://", raw):
        raise ValueError("must be empty or a URL with a scheme (http://host:port)")
    return raw


def url_list(raw: str) -> tuple[str, ...]:
    urls = tuple(u.strip().rstrip("/") for u in raw.split(",") if u.strip())
    bad = [u for u in urls if not re.match(r"^(dns\+)?https?://[^/\s]+", u)]
    if bad:
        raise ValueError(f"must be comma-separated http(s) URLs; not a URL: {bad[0]!r}")
    return urls
