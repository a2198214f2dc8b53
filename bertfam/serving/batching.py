"""Dynamic batching: items that arrive within a small wait budget run through the model together.

Each request puts its items on an asyncio queue and awaits one future per item. A worker task takes the
first waiting item, keeps collecting until `max_batch` items, `max_batch_tokens` tokens (each item's
count, `serving/budget.py`) or `wait_ms` have passed, and runs the batch on the model's executor thread
(so the event loop keeps accepting requests). If a batch raises, its items are re-run one at a time so a
single bad item fails alone and the others still get their answers.

Abandoned work is not done: an item whose request has gone (the client disconnected, or its deadline
passed; the request cancels its futures) is dropped before its batch starts, and a running batch whose
every item has gone stops at the next model call (`tasks/interrupt.py`: between MRC or NER windows).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from typing import Callable, Optional

from ..tasks.interrupt import Interrupted, interruptible

log = logging.getLogger("bertfam")


class QueueFull(Exception):
    """More items are waiting than the service accepts; the client should retry later."""


class DynamicBatcher:
    def __init__(self, fn: Callable[[list], list], executor: concurrent.futures.Executor, max_batch: int = 32,
                 wait_ms: float = 5.0, max_queue: int = 4096, name: str = "",
                 max_batch_tokens: Optional[int] = None):
        self.fn, self.executor, self.name = fn, executor, name
        self.max_batch, self.wait_s, self.max_queue = max(1, max_batch), max(0.0, wait_ms) / 1000.0, max_queue
        self.max_batch_tokens = max_batch_tokens
        self._queue: Optional[asyncio.Queue] = None
        self._held = None  # an entry taken from the queue that did not fit the last batch's token budget
        self._task: Optional[asyncio.Task] = None
        self._loop = None
        self.batches = 0  # statistics for /health
        self.items = 0
        self.dropped = 0  # items whose request had gone before their batch started
        self.interrupted = 0  # batches stopped part-way because every request in them had gone

    def _ensure_worker(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._loop is not loop:
            self._loop = loop
            self._queue = asyncio.Queue()
            self._held = None
            self._task = loop.create_task(self._work(), name=f"batcher-{self.name}")

    async def submit(self, items: list, tokens: Optional[list[int]] = None) -> list[asyncio.Future]:
        """Queue items (with their token counts, for the batch budget); returns their futures (each
        resolves to a result or raises the item's error). Cancel a future to abandon its item."""
        self._ensure_worker()
        if self._queue.qsize() + len(items) > self.max_queue:
            raise QueueFull(f"{self._queue.qsize()} items already waiting")
        loop = asyncio.get_running_loop()
        futs = []
        for i, it in enumerate(items):
            fut = loop.create_future()
            self._queue.put_nowait((it, fut, tokens[i] if tokens is not None else 0))
            futs.append(fut)
        return futs

    async def _next(self, timeout: Optional[float]):
        """The next entry whose request still waits (None when `timeout` passes first)."""
        while True:
            if self._held is not None:
                entry, self._held = self._held, None
            elif timeout is None:
                entry = await self._queue.get()
            elif not self._queue.empty():
                entry = self._queue.get_nowait()
            elif timeout <= 0:
                return None
            else:
                try:
                    entry = await asyncio.wait_for(self._queue.get(), timeout)
                except asyncio.TimeoutError:
                    return None
            if not entry[1].done():
                return entry
            self.dropped += 1

    async def _work(self) -> None:
        while True:
            first = await self._next(None)
            batch, tokens = [first], first[2]
            deadline = time.monotonic() + self.wait_s
            while len(batch) < self.max_batch:
                entry = await self._next(deadline - time.monotonic())
                if entry is None:
                    break
                if self.max_batch_tokens is not None and tokens + entry[2] > self.max_batch_tokens:
                    self._held = entry  # it starts the next batch
                    break
                batch.append(entry)
                tokens += entry[2]
            live = [(it, f) for it, f, _ in batch if not f.done()]
            if live:
                await self._run(live)

    async def _run(self, live: list) -> None:
        loop = asyncio.get_running_loop()
        items = [it for it, _ in live]
        futs = [f for _, f in live]
        gone = threading.Event()  # set on the loop thread, read by the model thread between model calls

        def on_done(_):
            if all(f.done() for f in futs):
                gone.set()
        for f in futs:
            f.add_done_callback(on_done)

        def call():
            with interruptible(gone.is_set):
                return self.fn(items)
        try:
            results = await loop.run_in_executor(self.executor, call)
            if len(results) != len(items):
                raise RuntimeError(f"{self.name}: predictor returned {len(results)} results for {len(items)} items")
        except Interrupted:
            self.interrupted += 1
            log.info("%s: batch of %d stopped part-way: every request in it has gone", self.name, len(items))
            return
        except Exception as e:  # noqa: BLE001 -- isolate the failing item(s) below
            if len(items) == 1:
                _settle(live[0][1], exc=e)
                return
            log.info("%s: batch of %d failed (%s); retrying items one by one", self.name, len(items), e)
            for pair in live:
                if not pair[1].done():
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
    if fut.done():  # the request gave up (timeout, disconnect) while the model ran
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)
