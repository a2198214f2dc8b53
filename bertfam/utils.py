"""Small helpers shared across bertfam (no model or data imports here)."""
from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import threading
import time
from typing import Callable, Iterator

_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process umask, read without changing it where the kernel reports it (Linux >= 4.7)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    # os.umask can only be read by setting it; the lock keeps two readers from restoring each other's value
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def default_file_mode() -> int:
    """The mode open(path, "w") would give a new file: mkstemp's 0600 would hide outputs from the group."""
    return 0o666 & ~current_umask()


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yield a temporary path next to `path`; rename it over `path` only if the block succeeds.

    The final file gets the umask's mode, like a file written in place."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    os.close(fd)
    try:
        yield tmp
        # after the block: a writer may have replaced the temporary file with one of its own mode
        os.chmod(tmp, default_file_mode())
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


def best_time(fn: Callable[[], object], reps: int) -> float:
    """The shortest wall time in seconds of `reps` calls of fn (the kernel probes' measure: the least disturbed
    call; warm-up calls are the caller's)."""
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@functools.lru_cache(maxsize=1)
def cpu_flags() -> list:
    """This CPU's feature flags from /proc/cpuinfo, read once ([] where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        return []
