"""Stopping a long prediction between model calls, when nobody waits for its answer any more.

The service runs a batch on a model thread; when every request in that batch has gone (its client
disconnected, or its deadline passed) the rest of the batch is wasted work that holds the model. The
caller sets a check for its thread (`interruptible(check)`); the pipelines call `check_interrupt()`
between model calls (MRC windows, NER windows), which raises `Interrupted` once the check says so. Outside
`interruptible` nothing is ever interrupted, so the Python API is unchanged.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

_local = threading.local()  # per thread: one model thread per model, each running its own batch


class Interrupted(Exception):
    """The prediction was stopped between model calls: nobody waits for its answer."""


@contextmanager
def interruptible(check: Callable[[], bool]) -> Iterator[None]:
    """While inside, `check_interrupt()` on this thread raises `Interrupted` once `check()` is true."""
    before = getattr(_local, "check", None)
    _local.check = check
    try:
        yield
    finally:
        _local.check = before


def check_interrupt() -> None:
    check = getattr(_local, "check", None)
    if check is not None and check():
        raise Interrupted("stopped between model calls: nobody waits for the answer")
