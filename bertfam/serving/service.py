"""The models behind the HTTP API: which model serves which endpoint, with one batcher per endpoint."""
from __future__ import annotations

import concurrent.futures
import logging
import os
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

from ..errors import ConfigError
from .batching import DynamicBatcher
from ..tasks.kinds import endpoint_kind, kind_of_head
from ..tasks.pipelines import MRCPipeline, Pipeline

log = logging.getLogger("bertfam")


@dataclass
class Limits:
    """Request limits (each one is a `bertfam serve` flag)."""

    max_body_bytes: int = 1 << 20  # whole request body
    max_texts: int = 64  # items in a list body, or texts in an embed body
    max_passage_chars: int = 20000  # any one text field; longer passages than the model window are windowed
    timeout_s: float = 30.0  # per request, queueing included
    max_batch: int = 32  # items per model call
    batch_wait_ms: float = 5.0  # how long the first item of a batch waits for company
    max_queue: int = 4096  # items waiting per endpoint before 429
    # Token budgets, counted after tokenization (serving/budget.py). On 2 CPU cores the shipped MRC model
    # reads about 3,000 tokens/s: a request of 32768 tokens holds the model ~11 s, well inside the 30 s
    # timeout, and a batch of 8192 tokens ~3 s, the longest a new request waits for the model to be free.
    max_request_tokens: int = 32768  # one request, all its items (MRC and NER: every window) -> 413
    max_batch_tokens: int = 8192  # one batch (MRC: one model call over windows); an item over it runs alone
    max_concurrent_requests: int = 64  # /v1 requests in progress (body read included) -> 429 beyond
    # slow clients (serving/server.py): each one holds a file descriptor and a connection slot
    max_connections: int = 256  # open connections; one more is closed at once
    header_timeout_s: float = 10.0  # request line + headers, from the connection (or the last answer)
    body_timeout_s: float = 20.0  # the whole body, from its first byte -> 408
    keep_alive_s: float = 15.0  # an idle kept-alive connection is closed after it

    def validate(self) -> "Limits":
        for name, v in asdict(self).items():
            if v < 0 or (v == 0 and name != "batch_wait_ms"):
                raise ConfigError(f"serve: --{name.replace('_', '-')} must be positive, got {v}")
        return self


@dataclass
class Route:
    endpoint: str
    model_name: str
    predictor: Pipeline  # the same object `bertfam.pipeline()` returns: one code path for Python and HTTP
    batcher: DynamicBatcher


class Service:
    """models: (name, model) pairs. Each head task gives its endpoint (first model wins when two share
    one); embed uses an encoder-only model if one is loaded, else the first model's backbone."""

    def __init__(self, models: Sequence[tuple[str, object]], limits: Optional[Limits] = None,
                 mrc_max_length: Optional[int] = None, mrc_doc_stride: Optional[int] = None):
        if not models:
            raise ConfigError("serve: give at least one --model")
        self.limits = (limits or Limits()).validate()
        self.models = [{"name": n, "task": m.task, "int8": m.config.quantization is not None, "endpoints": []}
                       for n, m in models]
        self.routes: dict[str, Route] = {}
        self._executors = []
        encoders = [i for i, (_, m) in enumerate(models) if m.task is None]
        embed_owner = encoders[0] if encoders else 0
        for k, ((name, model), info) in enumerate(zip(models, self.models)):
            ex = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"model-{name}")
            self._executors.append(ex)  # one thread per model: its calls run in turn, the event loop stays free
            # a head's endpoint is its kind's; the encoder kind's (embed) goes to one model only
            wanted = [kind_of_head(model.task).endpoint] if model.task is not None else []
            if k == embed_owner:
                wanted.append(kind_of_head(None).endpoint)
            for ep in wanted:
                if ep in self.routes:
                    log.warning("serve: %s already served by %s; %s not used for it", ep,
                                self.routes[ep].model_name, name)
                    continue
                self.routes[ep] = self._route(ep, name, model, ex, mrc_max_length, mrc_doc_stride)
                info["endpoints"].append(ep)

    def _route(self, ep: str, name: str, model, executor, mrc_max_length, mrc_doc_stride) -> Route:
        lim = self.limits
        cls = endpoint_kind(ep).pipeline
        if issubclass(cls, MRCPipeline):  # the serve options --mrc-max-length / --mrc-doc-stride are its
            pred = cls(model, lim.max_batch, mrc_max_length, mrc_doc_stride)
            # one model call reads at most max_batch_tokens of windows: a passage of many windows is read in
            # several calls, between which an abandoned request stops (tasks/interrupt.py)
            pred.inner.batch_size = max(1, min(lim.max_batch, lim.max_batch_tokens // pred.inner.settings.max_length))
        else:
            pred = cls(model, lim.max_batch)
        batcher = DynamicBatcher(pred.predict_batch, executor, lim.max_batch, lim.batch_wait_ms, lim.max_queue,
                                 name=f"{ep}@{name}", max_batch_tokens=lim.max_batch_tokens)
        return Route(ep, name, pred, batcher)

    @classmethod
    def from_dirs(cls, paths: Sequence[str], limits: Optional[Limits] = None, int8: bool = False, **kw) -> "Service":
        """int8: quantize each model for CPU inference (modeling/int8.py) before its pipelines take it."""
        from ..checkpoint import from_pretrained
        from ..modeling.optimize import optimize_for_inference

        models, seen = [], set()
        for p in paths:
            model = from_pretrained(p)
            if int8:
                optimize_for_inference(model, int8=True)
            if model.tokenizer is None:
                raise ConfigError(f"{p}: no tokenizer (vocab.txt or tokenizer.json) in the model directory")
            name = os.path.basename(os.path.normpath(p)) or p
            while name in seen:
                name += "_"
            seen.add(name)
            models.append((name, model))
        return cls(models, limits, **kw)

    def describe(self) -> dict:
        return {"status": "ok", "models": self.models,
                "endpoints": {ep: r.model_name for ep, r in self.routes.items()},
                "limits": asdict(self.limits),
                "batching": {ep: {"batches": r.batcher.batches, "items": r.batcher.items,
                                  "dropped": r.batcher.dropped, "interrupted": r.batcher.interrupted}
                             for ep, r in self.routes.items()}}

    async def close(self) -> None:
        """Stop the batch workers (they restart on the next request, e.g. a second app lifespan)."""
        for r in self.routes.values():
            await r.batcher.close()

    def shutdown(self) -> None:
        for ex in self._executors:
            ex.shutdown(wait=False, cancel_futures=True)
