"""Small helpers shared across bertfam (no model or data imports here)."""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Callable, Iterator


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yield a temporary path next to `path`; rename it over `path` only if the block succeeds."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_text(path: str, text: str) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)


def atomic_write(path: str, writer: Callable[[str], None]) -> None:
    """Call writer(tmp_path) and move the result into place atomically."""
    with atomic_path(path) as tmp:
        writer(tmp)
