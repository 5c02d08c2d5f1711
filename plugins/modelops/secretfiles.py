"""Files that hold secrets: private from the moment they exist, replaced atomically."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path


def write_private(path: Path, text: str, *, mode: int = 0o600) -> None:
    """Write ``text`` to ``path`` with ``mode`` from creation (never world-readable in between), atomically."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # a leftover tmp file keeps its old mode through O_CREAT
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)
    os.replace(tmp, path)


def generated_secret(path: Path, make: Callable[[], str] = lambda: secrets.token_urlsafe(24)) -> str:
    """The secret kept in ``path`` (0600), created with ``make()`` on first use."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, make())
    return path.read_text().strip()


def configured_secret(value: str, path: str) -> str:
    """A secret configured by value, else read from the file ``path`` (stripped), else ``""``.

    Read when asked (not cached), so a rotated file is picked up by the next client.

    Raises:
        OSError: ``path`` is named but cannot be read (a missing mount must not pass for "no secret").
    """
    if value:
        return value
    return Path(path).read_text().strip() if path else ""
