"""Progress of long work, readable wherever it runs: a tqdm bar on a terminal, else a line with the count,
the rate and the time left every `every_s` seconds (a bar's carriage returns make a mess of a log file).

    with Progress(len(items), "predict", unit="examples") as bar:
        for chunk in chunks:
            ...
            bar.update(len(chunk))

The lines go to the "bertfam.progress" logger, which the CLI shows even without -v; work that ends before
the first period prints nothing (a few seconds need no report).
"""
from __future__ import annotations

import logging
import sys
import time
from typing import Optional

console = logging.getLogger("bertfam.progress")
EVERY_S = 10.0  # seconds between lines without a terminal (a test sets 0: a line per update)


def eta(seconds: float) -> str:
    """Seconds as '42 s', '3 min 5 s', '1 h 02 min'."""
    s = int(round(max(seconds, 0)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Progress:
    def __init__(self, total: Optional[int], desc: str, unit: str = "it", enabled: bool = True,
                 every_s: Optional[float] = None, tty: Optional[bool] = None):
        self.total, self.desc, self.unit = total, desc, unit
        self.every_s = EVERY_S if every_s is None else every_s
        self.done = 0
        self.t0 = self._last = time.monotonic()
        self.enabled = enabled
        tty = sys.stderr.isatty() if tty is None else tty
        self.bar = None
        if enabled and tty:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=f" {unit}", dynamic_ncols=True, leave=False)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def line(self) -> str:
        """'predict: 300/1000 examples (30%), 25.0 examples/s, 28 s left'."""
        dt = max(time.monotonic() - self.t0, 1e-9)
        rate = self.done / dt
        text = f"{self.desc}: {self.done}"
        if self.total:
            text += f"/{self.total} {self.unit} ({100 * self.done / self.total:.0f}%)"
        else:
            text += f" {self.unit}"
        text += f", {rate:.1f} {self.unit}/s"
        if self.total and rate > 0 and self.done < self.total:
            text += f", {eta((self.total - self.done) / rate)} left"
        return text

    def set(self, done: int) -> None:
        """Move to `done` (a count from the start; never backwards)."""
        if done > self.done:
            self.update(done - self.done)

    def update(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            console.info(self.line())

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.enabled and time.monotonic() - self.t0 >= self.every_s:  # it reported: say that it ended
            console.info("%s: done, %d %s in %s", self.desc, self.done, self.unit, eta(time.monotonic() - self.t0))
        self.enabled = False
