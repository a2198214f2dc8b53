"""The FastAPI application: /v1/{mrc,classify,ner,embed,fill-mask}, /health, the web page at /, /docs.

Every request body is read under a size limit, parsed and validated here, so that anything a client
sends gets a 4xx whose `error` names the field (`question: Field required`, `[3].text: ...`); the
model only ever sees well-formed items. Error bodies are `{"error": "<one line>", "field": <name|null>}`.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from contextlib import asynccontextmanager
from typing import Any, Literal, Optional

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import BertfamError
from .batching import QueueFull
from ..tasks.pipelines import InputError
from .service import Service

log = logging.getLogger("bertfam")
STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")


# ------------------------------------------------------------------ request / response schemas
class _Strict(BaseModel):
    # no silent coercion (a number is not a text) and typos in field names are reported, not ignored
    model_config = ConfigDict(extra="forbid", strict=True)


class MRCItem(_Strict):
    question: str = Field(description="the question", examples=["中国的首都是哪里？"])
    passage: str = Field(description="the passage to read; longer than the model window is fine (windows)",
                         examples=["北京是中华人民共和国的首都，也是全国的政治、文化中心。"])
    title: Optional[str] = Field(None, description="optional title of the passage")


class MRCResult(BaseModel):
    answer: Optional[str] = Field(description="the answer text, null when the passage holds no answer")
    start: Optional[int] = Field(description="character offset of the answer in the passage")
    end: Optional[int] = Field(description="character offset just past the answer (exclusive)")
    score: float = Field(description="confidence in the answer, or in 'no answer' when answerable is false")
    answerable: bool


class ClassifyItem(_Strict):
    text: str = Field(examples=["这家餐厅的菜很好吃。"])
    text_pair: Optional[str] = Field(None, description="second text for pair tasks (NLI, similarity)")


class ClassifyResult(BaseModel):
    label: Optional[str] = Field(None, description="the label's readable name where the training data had one")
    code: Optional[str] = Field(None, description="the label as the training file wrote it (e.g. TNEWS \"104\"), "
                                                  "given when it differs from label")
    score: float
    probabilities: Optional[dict[str, float]] = None
    truncated: bool = Field(description="the input was longer than the model window and was cut")


class NERItem(_Strict):
    text: str = Field(examples=["李明在北京大学读书。"])


class Entity(BaseModel):
    type: str
    text: str
    start: int
    end: int = Field(description="exclusive character offset")
    score: float


class NERResult(BaseModel):
    entities: list[Entity]


class FillMaskItem(_Strict):
    text: str = Field(description="text with one or more [MASK] tokens", examples=["北京是中国的[MASK]都。"])
    top_k: int = Field(5, ge=1, le=100)


class Candidate(BaseModel):
    token: str
    id: int
    score: float


class FillMaskResult(BaseModel):
    predictions: list[list[Candidate]] = Field(description="top-k candidates for each [MASK], in text order")


class EmbedBody(_Strict):
    texts: list[str] = Field(examples=[["今天天气很好", "今天是晴天"]])
    pooling: Literal["mean", "cls"] = "mean"
    normalize: bool = True


class EmbedResult(BaseModel):
    vectors: list[list[float]]
    dim: int
    truncated: list[bool]
    model: str


class ErrorBody(BaseModel):
    error: str = Field(description="one line naming the field and what is wrong")
    field: Optional[str] = None
    problems: Optional[list[dict]] = Field(None, description="every validation problem: [{field, error}]")


ITEM_OF = {"mrc": (MRCItem, MRCResult), "classify": (ClassifyItem, ClassifyResult), "ner": (NERItem, NERResult),
           "fill-mask": (FillMaskItem, FillMaskResult)}
TEXT_FIELDS = ("question", "passage", "title", "text", "text_pair")


# ------------------------------------------------------------------ errors
class ApiError(Exception):
    def __init__(self, status: int, message: str, field: Optional[str] = None, headers: Optional[dict] = None,
                 problems: Optional[list] = None):
        super().__init__(message)
        self.status, self.message, self.field, self.headers = status, message, field, headers
        self.problems = problems


def _error(status: int, message: str, field: Optional[str] = None, headers: Optional[dict] = None,
           problems: Optional[list] = None) -> JSONResponse:
    body = {"error": message, "field": field}
    if problems:
        body["problems"] = problems
    return JSONResponse(body, status_code=status, headers=headers)


def _loc(prefix: str, loc: tuple) -> str:
    """('body', 2, 'question') style locations -> '[2].question'; () -> 'body'."""
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def _validation_problems(err: ValidationError, prefix: str = "") -> list[dict]:
    """Every problem as {field, error}; the first one becomes the response's one-line `error`."""
    out = []
    for e in err.errors(include_url=False):
        field = _loc(prefix, tuple(e["loc"]))
        msg = e["msg"]
        if not e["loc"] and e["type"] in ("model_type", "dict_type", "model_attributes_type"):
            msg = f"expected a JSON object, got {_json_type(e.get('input'))}"
        out.append({"field": field, "error": f"{field}: {msg}"})
    return out


def _json_type(v: Any) -> str:
    for t, name in ((bool, "a boolean"), (int, "a number"), (float, "a number"), (str, "a string"),
                    (list, "an array"), (type(None), "null")):
        if isinstance(v, t):
            return name
    return type(v).__name__


# ------------------------------------------------------------------ body size limit
class BodyLimit:
    """ASGI middleware: refuse bodies over `limit` bytes with 413, whether or not Content-Length is sent,
    before the application reads them."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.limit
            except ValueError:
                return await _send(send, _error(400, "body: Content-Length is not a number"), scope, receive)
            if too_big:
                return await _send(send, self._too_big(), scope, receive)
        chunks, size = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                return await _send(send, self._too_big(), scope, receive)
            chunks.append(chunk)
            if not msg.get("more_body"):
                break
        body, sent = b"".join(chunks), False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _too_big(self) -> JSONResponse:
        return _error(413, f"body: larger than the limit of {self.limit} bytes (--max-body-bytes)", "body")


async def _send(send, response, scope, receive):
    await response(scope, receive, send)


# ------------------------------------------------------------------ the app
def _static_page(name: str) -> HTMLResponse:
    with open(os.path.join(STATIC, name), encoding="utf-8") as f:
        return HTMLResponse(f.read())


def create_app(service: Service) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app):
        yield
        await service.close()

    # FastAPI's /docs and /redoc load their scripts from a CDN and show a blank page offline: /docs is
    # served below from static/docs.html, which reads /openapi.json and needs nothing else.
    app = FastAPI(title="bertfam", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="BERT-family models over HTTP: reading comprehension, classification, NER, "
                              "embeddings, fill-mask. Errors: `{error, field}` with a 4xx status for bad input.")
    app.state.service = service
    app.state.started = time.time()
    lim = service.limits
    app.add_middleware(BodyLimit, limit=lim.max_body_bytes)

    @app.exception_handler(ApiError)
    async def _api_error(request, e: ApiError):
        return _error(e.status, e.message, e.field, e.headers, e.problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request, e: StarletteHTTPException):
        return _error(e.status_code, str(e.detail), None, getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request, e: Exception):  # a bug, never the client's fault: logged, one line back
        log.exception("serve: unexpected error on %s", request.url.path)
        return _error(500, f"internal error ({type(e).__name__}); the service keeps running")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index():
        return _static_page("index.html")

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def docs():
        return _static_page("docs.html")

    @app.get("/health", summary="service status: loaded models, endpoints, limits, batching statistics")
    async def health():
        d = service.describe()
        d["uptime_s"] = round(time.time() - app.state.started, 1)
        return d

    errors = {400: {"model": ErrorBody}, 404: {"model": ErrorBody}, 413: {"model": ErrorBody},
              422: {"model": ErrorBody}, 429: {"model": ErrorBody}, 503: {"model": ErrorBody}}

    for ep, (item_cls, result_cls) in ITEM_OF.items():
        schema = item_cls.model_json_schema()
        body_schema = {"oneOf": [schema, {"type": "array", "items": schema, "maxItems": lim.max_texts}]}
        app.post(f"/v1/{ep}", summary=f"{ep}: one object, or a list of objects (answers come back in order)",
                 responses={200: {"model": result_cls, "description": "one result, or a list for a list body"},
                            **errors},
                 openapi_extra={"requestBody": {"required": True,
                                                "content": {"application/json": {"schema": body_schema}}}}
                 )(_item_endpoint(service, ep, item_cls))

    @app.post("/v1/embed", summary="embed: sentence vectors for a list of texts", response_model=None,
              responses={200: {"model": EmbedResult}, **errors},
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": EmbedBody.model_json_schema()}}}})
    async def embed(request: Request):
        route = _route(service, "embed")
        body = _validate(EmbedBody, await _json(request), "")
        if not body.texts:
            raise ApiError(422, "texts: must hold at least one text", "texts")
        if len(body.texts) > lim.max_texts:
            raise ApiError(413, f"texts: {len(body.texts)} texts, over the limit of {lim.max_texts} per request "
                                f"(--max-texts)", "texts")
        for i, t in enumerate(body.texts):
            _check_text(f"texts[{i}]", t, lim.max_passage_chars)
        items = [{"text": t, "pooling": body.pooling, "normalize": body.normalize} for t in body.texts]
        results = await _answer(route, items, "texts", lim.timeout_s)
        return {"vectors": [r["vector"] for r in results], "dim": len(results[0]["vector"]),
                "truncated": [r["truncated"] for r in results], "model": route.model_name}

    return app


def _route(service: Service, ep: str):
    route = service.routes.get(ep)
    if route is None:
        need = {"mrc": "span", "classify": "classification or regression", "ner": "token",
                "fill-mask": "mlm or pretraining"}.get(ep, "any")
        raise ApiError(404, f"/v1/{ep}: no loaded model serves it (load one with a {need} head)")
    return route


def _item_endpoint(service: Service, ep: str, item_cls):
    lim = service.limits
    adapter = TypeAdapter(item_cls)

    async def endpoint(request: Request):
        route = _route(service, ep)
        raw = await _json(request)
        single = not isinstance(raw, list)
        if single:
            items = [_validate(adapter, raw, "")]
        else:
            if not raw:
                raise ApiError(422, "body: empty list; send one object or a list of objects", "body")
            if len(raw) > lim.max_texts:
                raise ApiError(413, f"body: {len(raw)} items, over the limit of {lim.max_texts} per request "
                                    f"(--max-texts)", "body")
            items = [_validate(adapter, x, f"[{i}]") for i, x in enumerate(raw)]
        dicts = []
        for i, it in enumerate(items):
            d = it.model_dump()
            prefix = "" if single else f"[{i}]."
            for f in TEXT_FIELDS:
                if d.get(f) is not None:
                    _check_text(prefix + f, d[f], lim.max_passage_chars)
            try:
                route.predictor.check(d)
            except InputError as e:
                raise ApiError(422, prefix + str(e), prefix + e.field) from None
            dicts.append(d)
        results = await _answer(route, dicts, None if single else "", lim.timeout_s)
        return results[0] if single else results

    endpoint.__name__ = ep.replace("-", "_")
    return endpoint


async def _json(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        raise ApiError(400, "body: empty; send a JSON object", "body")
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise ApiError(400, "body: not UTF-8 text", "body") from None
    except json.JSONDecodeError as e:
        raise ApiError(400, f"body: invalid JSON ({e.msg} at line {e.lineno} column {e.colno})", "body") from None
    except RecursionError:
        raise ApiError(400, "body: JSON nested too deeply", "body") from None


def _validate(adapter, value: Any, prefix: str):
    try:
        if isinstance(adapter, TypeAdapter):
            return adapter.validate_python(value)
        return adapter.model_validate(value)
    except ValidationError as e:
        problems = _validation_problems(e, prefix)
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise ApiError(422, problems[0]["error"] + more, problems[0]["field"], problems=problems) from None


def _check_text(field: str, text: str, max_chars: int) -> None:
    if len(text) > max_chars:
        raise ApiError(422, f"{field}: {len(text)} characters, over the limit of {max_chars} "
                            f"(--max-passage-chars)", field)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # JSON allows "\ud800"; the tokenizer (Rust) cannot take it
        raise ApiError(422, f"{field}: not valid Unicode (a lone surrogate escape)", field) from None


async def _answer(route, items: list[dict], list_prefix: Optional[str], timeout_s: float) -> list:
    """Run items through the route's batcher; map per-item failures to one HTTP error."""
    try:
        futs = await route.batcher.submit(items)
    except QueueFull as e:
        raise ApiError(429, f"busy: {e}; retry shortly", None, {"Retry-After": "1"}) from None
    try:
        results = await asyncio.wait_for(asyncio.gather(*futs, return_exceptions=True), timeout_s)
    except asyncio.TimeoutError:
        for f in futs:
            f.cancel()
        raise ApiError(503, f"timed out after {timeout_s:g} s (--timeout); the service is busy, retry later",
                       None, {"Retry-After": "1"}) from None
    for i, r in enumerate(results):
        if isinstance(r, BaseException):
            raise _item_error(r, i, list_prefix, route.endpoint)
    return results


def _item_error(e: BaseException, i: int, list_prefix: Optional[str], ep: str) -> ApiError:
    prefix = "" if list_prefix is None else f"{list_prefix}[{i}]" if list_prefix else f"[{i}]"
    if isinstance(e, InputError):
        field = f"{prefix}.{e.field}" if prefix else e.field
        return ApiError(422, f"{field}: {e.message}", field)
    if isinstance(e, (BertfamError, ValueError)):  # the model refused this input (e.g. the tokenizer)
        return ApiError(422, f"{prefix or 'body'}: cannot be processed: {str(e).splitlines()[0] if str(e) else e!r}",
                        prefix or "body")
    log.error("serve: /v1/%s failed on item %d", ep, i, exc_info=e)
    return ApiError(500, f"internal error while running the model ({type(e).__name__}); "
                         "the service keeps running")
