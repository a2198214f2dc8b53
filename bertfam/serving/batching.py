"""Dynamic batching: items that arrive within a small wait budget run through the model together.

Each request puts its items on an asyncio queue and awaits one future per item. A worker task takes the
first waiting item, keeps collecting until `max_batch` items or `wait_ms` have passed, and runs the batch
on the model's executor thread (so the event loop keeps accepting requests). If a batch raises, its items
are re-run one at a time so a single bad item fails alone and the others still get their answers.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import Callable, Optional

log = logging.getLogger("bertfam")


class QueueFull(Exception):
    """More items are waiting than the service accepts; the client should retry later."""


class DynamicBatcher:
    def __init__(self, fn: Callable[[list], list], executor: concurrent.futures.Executor, max_batch: int = 32,
                 wait_ms: float = 5.0, max_queue: int = 4096, name: str = ""):
        self.fn, self.executor, self.name = fn, executor, name
        self.max_batch, self.wait_s, self.max_queue = max(1, max_batch), max(0.0, wait_ms) / 1000.0, max_queue
        self._queue: Optional[asyncio.Queue] = None
        self._task: Optional[asyncio.Task] = None
        self._loop = None
        self.batches = 0  # statistics for /health
        self.items = 0

    def _ensure_worker(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._loop is not loop:
            self._loop = loop
            self._queue = asyncio.Queue()
            self._task = loop.create_task(self._work(), name=f"batcher-{self.name}")

    async def submit(self, items: list) -> list[asyncio.Future]:
        """Queue items; returns their futures (each resolves to a result or raises the item's error)."""
        self._ensure_worker()
        if self._queue.qsize() + len(items) > self.max_queue:
            raise QueueFull(f"{self._queue.qsize()} items already waiting")
        loop = asyncio.get_running_loop()
        futs = []
        for it in items:
            fut = loop.create_future()
            self._queue.put_nowait((it, fut))
            futs.append(fut)
        return futs

    async def _work(self) -> None:
        q = self._queue
        while True:
            batch = [await q.get()]
            deadline = time.monotonic() + self.wait_s
            while len(batch) < self.max_batch:
                left = deadline - time.monotonic()
                if left <= 0 and q.empty():
                    break
                try:
                    batch.append(q.get_nowait() if not q.empty() else await asyncio.wait_for(q.get(), left))
                except asyncio.TimeoutError:
                    break
            live = [(it, f) for it, f in batch if not f.done()]  # skip requests that already timed out
            if live:
                await self._run(live)

    async def _run(self, live: list) -> None:
        loop = asyncio.get_running_loop()
        items = [it for it, _ in live]
        try:
            results = await loop.run_in_executor(self.executor, self.fn, items)
            if len(results) != len(items):
                raise RuntimeError(f"{self.name}: predictor returned {len(results)} results for {len(items)} items")
        except Exception as e:  # noqa: BLE001 -- isolate the failing item(s) below
            if len(items) == 1:
                _settle(live[0][1], exc=e)
                return
            log.info("%s: batch of %d failed (%s); retrying items one by one", self.name, len(items), e)
            for pair in live:
                await self._run([pair])
            return
        self.batches += 1
        self.items += len(items)
        for (_, fut), r in zip(live, results):
            _settle(fut, result=r)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, RuntimeError):
                pass
            self._task = None


def _settle(fut: asyncio.Future, result=None, exc: Optional[BaseException] = None) -> None:
    if fut.done():  # the request gave up (timeout) while the model ran
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)
