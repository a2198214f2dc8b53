"""The FastAPI application: /v1/{mrc,classify,ner,embed,fill-mask}, /health, the web page at /, /docs.

Request bodies are pydantic models that FastAPI parses, validates and writes into the OpenAPI schema:
every `/v1/...` except embed takes one object or a list of them (`OneOrMany`), embed one `EmbedBody`. The
request limits are part of those types, built once per app from the service's `Limits` by
`request_types` (items per list, characters per text field), so pydantic checks them with everything else
and the schema shows them (`maxItems`, `maxLength`). Whatever a client sends that is wrong gets a 4xx whose
body is `{"error": "<one line naming the field>", "field": <name|null>}` (`question: Field required`,
`[3].text: ...`; validation errors also list every `problems[]`): `client_error` translates FastAPI's
validation errors into it. The model only ever sees well-formed items.
"""
import asyncio
import hmac
import logging
import os
import re
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Optional, Union

from fastapi import Body, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..config import MRCSettings
from ..errors import BertfamError
from ..tasks.blank import BLANK_MESSAGE, NOT_BLANK
from ..tasks.kinds import endpoint_kind, heads_of
from ..tasks.pipelines import InputError
from .batching import QueueFull
from .budget import token_counts
from .service import Limits, Route, Service

log = logging.getLogger("bertfam")
STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")


# ------------------------------------------------------------------ request / response schemas
class _Strict(BaseModel):
    # no silent coercion (a number is not a text) and typos in field names are reported, not ignored
    model_config = ConfigDict(extra="forbid", strict=True)


# every text a model reads must hold a character that is not blank (tasks/blank.py); in the schema too
_FILLED = dict(pattern=NOT_BLANK)


def _whole_number(v: Any) -> Any:
    """JSON's integers: 3 and 3.0 (JSON Schema's `integer` holds both), never "3", true or 3.5."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError("must be an integer")
    return v


def _top_k(n_best: int) -> Any:
    """MRC's top_k: a whole number in 1..n_best, or none (the bounds inside, so that the schema states them)."""
    return Optional[Annotated[int, Field(ge=1, le=n_best), BeforeValidator(_whole_number)]]


class MRCItem(_Strict):
    question: str = Field(description="the question; not blank", examples=["中国的首都是哪里？"], **_FILLED)
    passage: str = Field(description="the passage to read, not blank; longer than the model window is fine "
                                     "(windows)", examples=["北京是中华人民共和国的首都，也是全国的政治、文化中心。"],
                         **_FILLED)
    title: Optional[str] = Field(None, description="optional title of the passage")
    top_k: _top_k(MRCSettings.n_best) = Field(
        None, description="also return the k best spans (`candidates`), whether or not the system answers; at most "
                          "the model's n_best (the schema's maximum)")


class MRCSpan(BaseModel):
    text: str
    start: int = Field(description="character offset in the passage")
    end: int = Field(description="character offset just past the span (exclusive)")
    score: float = Field(description="the span's probability among the n-best x P(answerable)")


class MRCResult(BaseModel):
    answer: Optional[str] = Field(description="the answer text, null when the passage holds no answer")
    start: Optional[int] = Field(description="character offset of the answer in the passage")
    end: Optional[int] = Field(description="character offset just past the answer (exclusive)")
    score: float = Field(description="confidence in the answer, or in 'no answer' when answerable is false")
    answerable: bool
    candidates: Optional[list[MRCSpan]] = Field(
        None, description="only with top_k: the k best spans, best first, also when the system declines")


class ClassifyItem(_Strict):
    text: str = Field(description="not blank", examples=["这家餐厅的菜很好吃。"], **_FILLED)
    text_pair: Optional[str] = Field(None, description="second text for pair tasks (NLI, similarity); not blank",
                                     **_FILLED)


class ClassifyResult(BaseModel):
    label: Optional[str] = Field(None, description="the label's readable name where the training data had one")
    code: Optional[str] = Field(None, description="the label as the training file wrote it (e.g. TNEWS \"104\"), "
                                                  "given when it differs from label")
    score: float
    probabilities: Optional[dict[str, float]] = None
    truncated: bool = Field(description="the input was longer than the model window and was cut")


class NERItem(_Strict):
    text: str = Field(description="not blank", examples=["李明在北京大学读书。"], **_FILLED)


class Entity(BaseModel):
    type: str
    text: str
    start: int
    end: int = Field(description="exclusive character offset")
    score: float


class NERResult(BaseModel):
    entities: list[Entity]


class FillMaskItem(_Strict):
    text: str = Field(description="text with one or more [MASK] tokens", examples=["北京是中国的[MASK]都。"],
                      **_FILLED)
    top_k: int = Field(5, ge=1, le=100)


class Candidate(BaseModel):
    token: str
    id: int
    score: float


class FillMaskResult(BaseModel):
    predictions: list[list[Candidate]] = Field(description="top-k candidates for each [MASK], in text order")


class EmbedBody(_Strict):
    # `text` (one string) is the name every other endpoint uses; `texts` the list; give exactly one of them
    # (the schema says so: oneOf on which is required; neither is nullable, a left-out one is None here)
    model_config = ConfigDict(extra="forbid", strict=True,
                              json_schema_extra={"oneOf": [{"required": ["texts"]}, {"required": ["text"]}]})
    texts: list[Annotated[str, Field(**_FILLED)]] = Field(None, min_length=1, examples=[["今天天气很好", "今天是晴天"]])
    text: Annotated[str, Field(**_FILLED)] = Field(None, description="one text (instead of texts)")
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


# endpoint (a task kind's, tasks/kinds.py) -> its request item and result schemas; embed has its own body
ITEM_OF = {"mrc": (MRCItem, MRCResult), "classify": (ClassifyItem, ClassifyResult), "ner": (NERItem, NERResult),
           "fill-mask": (FillMaskItem, FillMaskResult)}
ONE, MANY = "object", "list"  # the tags of a one-or-many body's two branches (not part of field names)


def _one_or_many_tag(value: Any) -> str:
    return MANY if isinstance(value, list) else ONE


def _limited(model: type, max_chars: int, **fields) -> type:
    """`model` under its own name, every text field at most `max_chars` characters; `fields` (name ->
    (type, Field)) redeclared."""
    ns = {"__module__": __name__, "__qualname__": model.__name__, "__doc__": model.__doc__,
          "model_config": ConfigDict(str_max_length=max_chars),
          "__annotations__": {name: t for name, (t, _) in fields.items()}}
    ns.update({name: f for name, (_, f) in fields.items()})
    return type(model.__name__, (model,), ns)


@dataclass(frozen=True)
class RequestTypes:
    """The body type of every endpoint, carrying one app's limits."""

    items: dict  # endpoint -> one object or a list of 1..max_texts objects of its item model
    embed: type  # EmbedBody with 1..max_texts texts


def request_types(lim: Limits, mrc_n_best: int = MRCSettings.n_best) -> RequestTypes:
    """The request limits as types: a list body holds 1..max_texts items, an embed body 1..max_texts texts,
    and every text field (question, passage, title, text, text_pair, texts[i]) at most max_passage_chars
    characters. A JSON array is validated as the list, anything else as the one object, so an error names
    only the fields of what was sent."""
    # the MRC model's n_best bounds top_k in the schema itself, so that what the schema allows is answered
    top_k = MRCItem.model_fields["top_k"]
    bounded = {MRCItem: {"top_k": (_top_k(mrc_n_best), Field(None, description=top_k.description))}}

    def one_or_many(item):
        item = _limited(item, lim.max_passage_chars, **bounded.get(item, {}))
        return Annotated[Union[Annotated[item, Tag(ONE)],
                               Annotated[list[item], Field(min_length=1, max_length=lim.max_texts), Tag(MANY)]],
                         Discriminator(_one_or_many_tag)]

    texts = EmbedBody.model_fields["texts"]
    embed = _limited(EmbedBody, lim.max_passage_chars,
                     texts=(list[Annotated[str, Field(**_FILLED)]],
                            Field(None, min_length=1, max_length=lim.max_texts, examples=texts.examples)))
    return RequestTypes({ep: one_or_many(item) for ep, (item, _) in ITEM_OF.items()}, embed)


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


def field_name(loc: tuple) -> str:
    """A body location as the client wrote it: ('body', 'list', 2, 'question') -> '[2].question',
    ('body', 'texts', 1) -> 'texts[1]', ('body',) -> 'body'."""
    parts = list(loc[1:] if loc[:1] == ("body",) else loc)
    if parts[:1] in ([ONE], [MANY]):
        parts = parts[1:]
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


_OBJECT_EXPECTED = ("model_type", "dict_type", "model_attributes_type")


def _problem(e: dict) -> tuple[int, dict]:
    """(status, {field, error}) of one validation error; a limit's error names its flag."""
    field = field_name(tuple(e["loc"]))
    error_type, ctx, value = e["type"], e.get("ctx") or {}, e.get("input")  # pydantic's error type
    status = 422
    if error_type == "string_too_long":
        msg = f"{len(value)} characters, over the limit of {ctx['max_length']} (--max-passage-chars)"
    elif error_type == "string_pattern_mismatch" and ctx.get("pattern") == NOT_BLANK:
        msg = BLANK_MESSAGE
    elif error_type == "string_unicode":  # JSON allows "\ud800"; the tokenizer (Rust) cannot take it
        msg = "not valid Unicode (a lone surrogate escape)"
    elif error_type == "too_long":
        status = 413
        msg = (f"{ctx.get('actual_length')} {'texts' if field == 'texts' else 'items'}, over the limit of "
               f"{ctx['max_length']} per request (--max-texts)")
    elif error_type == "too_short":
        msg = "must hold at least one text" if field == "texts" else "empty list; send one object or a list of objects"
    elif error_type in _OBJECT_EXPECTED:
        msg = f"expected a JSON object, got {_json_type(value)}"
    else:
        msg = e["msg"]
    return status, {"field": field, "error": f"{field}: {msg}"}


def client_error(e: RequestValidationError, content_type: Optional[str]) -> JSONResponse:
    """FastAPI's validation error as one error body: 400 for a body that is not JSON, 415 for another
    Content-Type, else the first problem's status (413 over a limit of --max-texts, 422 otherwise) with
    every problem listed."""
    errors = e.errors()
    first = errors[0]
    if isinstance(e.body, (bytes, bytearray)):  # not read as JSON: another content type
        return _error(415, f"body: send JSON with Content-Type: application/json (got {content_type})", "body")
    if first["type"] == "json_invalid":
        return _error(400, _invalid_json(e.body, first["loc"][-1], (first.get("ctx") or {}).get("error", "")), "body")
    if first["type"] == "missing" and tuple(first["loc"]) == ("body",):
        return _error(400, "body: empty; send a JSON object", "body")
    problems = [_problem(x) for x in errors]
    status, head = problems[0]
    more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
    return _error(status, head["error"] + more, head["field"], problems=[p for _, p in problems])


def _invalid_json(doc: Any, pos: Any, msg: str) -> str:
    if isinstance(doc, (bytes, bytearray)):
        doc = doc.decode("utf-8", "replace")
    if not isinstance(doc, str) or not isinstance(pos, int):
        return f"body: invalid JSON ({msg})"
    line, column = doc.count("\n", 0, pos) + 1, pos - doc.rfind("\n", 0, pos)
    return f"body: invalid JSON ({msg} at line {line} column {column})"


def _unreadable(cause: Optional[BaseException]) -> str:
    """Why FastAPI could not read the body as JSON (it answers 400 and keeps the reason as the cause)."""
    if isinstance(cause, RecursionError):
        return "body: JSON nested too deeply"
    if isinstance(cause, UnicodeDecodeError):
        return "body: not UTF-8 text"
    return "body: cannot be read as JSON"


def _json_type(v: Any) -> str:
    for t, name in ((bool, "a boolean"), (int, "a number"), (float, "a number"), (str, "a string"),
                    (list, "an array"), (type(None), "null")):
        if isinstance(v, t):
            return name
    return type(v).__name__


# ------------------------------------------------------------------ body size limit
class BodyLimit:
    """ASGI middleware: refuse bodies over `limit` bytes with 413, whether or not Content-Length is sent,
    before the application reads them, and bodies not complete within `timeout_s` with 408."""

    def __init__(self, app, limit: int, timeout_s: Optional[float] = None):
        self.app, self.limit, self.timeout_s = app, limit, timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
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
            try:  # a client that sends its body a byte at a time holds a connection: it gets a deadline
                msg = await asyncio.wait_for(receive(), None if deadline is None else deadline - time.monotonic())
            except asyncio.TimeoutError:
                return await _send(send, _error(408, f"body: not received within {self.timeout_s:g} s "
                                                     "(--body-timeout)", "body", {"Connection": "close"}),
                                   scope, receive)
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


class ConcurrencyLimit:
    """ASGI middleware: at most `limit` /v1 requests in progress (from the first byte of the body to the
    last of the answer); one more gets 429 with Retry-After at once, without its body being read."""

    def __init__(self, app, limit: int):
        self.app, self.limit, self.active = app, limit, 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            return await self.app(scope, receive, send)
        if self.active >= self.limit:
            return await _send(send, _error(429, f"busy: {self.active} requests in progress, the limit of "
                                                 f"--max-concurrent-requests; retry shortly", None,
                                            {"Retry-After": "1"}), scope, receive)
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1


# ------------------------------------------------------------------ who may call: Host, key, Content-Type
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class Access:
    """Who may call the service. api_keys: accepted `Authorization: Bearer <key>` values (none: no key
    asked). allowed_hosts: accepted `Host` header names, without port ("*": any); by default the loopback
    names, so a web page on another site cannot reach a loopback service by DNS rebinding."""

    api_keys: tuple = ()
    allowed_hosts: tuple = LOOPBACK_HOSTS


# pages that hold no data: the web page and the API docs load without a key, then ask for one (their
# requests to /health, /openapi.json and /v1 carry it)
_OPEN_PATHS = ("/", "/docs")


def host_name(header: str) -> str:
    """The name of a Host header value, lower case, without port: '[::1]:8000' -> '::1'."""
    h = header.strip().lower()
    if h.startswith("["):
        return h[1:h.find("]")] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


def is_json_type(content_type: Optional[str]) -> bool:
    """application/json or application/<x>+json, parameters (charset) allowed."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class Guard:
    """ASGI middleware, outermost: Host allow-list (400), API key (401), JSON Content-Type on every POST
    (415), before anything reads the body. A page on another site can send a cross-origin POST without
    preflight only as text/plain, a form or without a type; refusing all of them closes that door."""

    def __init__(self, app, access: Access):
        self.app, self.access = app, access
        self.hosts = {h.lower() for h in access.allowed_hosts}
        self.keys = [k.encode("utf-8") for k in access.api_keys]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        refused = self.check(scope)
        if refused is not None:
            return await _send(send, refused, scope, receive)
        await self.app(scope, receive, send)

    def check(self, scope) -> Optional[JSONResponse]:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        if "*" not in self.hosts:
            host = host_name(headers.get("host", ""))
            if host not in self.hosts:
                return _error(400, f"Host: {host or '(none)'!r} is not an allowed host name (--allowed-hosts)",
                              "Host")
        if self.keys and scope["path"] not in _OPEN_PATHS:
            auth = headers.get("authorization", "")
            scheme, _, key = auth.partition(" ")
            given = key.strip().encode("utf-8", "replace")
            # compare_digest with every key, in constant time for each: no timing hint of a key's prefix
            ok = scheme.lower() == "bearer" and any([hmac.compare_digest(given, k) for k in self.keys])
            if not ok:
                why = "missing" if not auth else "not a valid key"
                return _error(401, f"Authorization: {why}; send Authorization: Bearer <key> (--api-key)",
                              "Authorization", {"WWW-Authenticate": "Bearer"})
        if scope["method"] == "POST" and not is_json_type(headers.get("content-type")):
            got = headers.get("content-type")
            return _error(415, f"Content-Type: send JSON with Content-Type: application/json (got "
                               f"{got if got is not None else 'none'})", "Content-Type")
        return None


# ------------------------------------------------------------------ the app
def _static_page(name: str) -> HTMLResponse:
    """static/NAME, with each `// @include FILE` line replaced by static/FILE: the pages share their script
    (the API-key prompt) and are still served self-contained, one response each."""
    with open(os.path.join(STATIC, name), encoding="utf-8") as f:
        page = f.read()
    for inc in re.findall(r"^// @include (\S+)$", page, flags=re.M):
        with open(os.path.join(STATIC, os.path.basename(inc)), encoding="utf-8") as f:
            page = page.replace(f"// @include {inc}", f.read().rstrip("\n"))
    return HTMLResponse(page)


def create_app(service: Service, access: Optional[Access] = None) -> FastAPI:
    """The app for `service`; `access` (default: `Access()`, loopback host names, no key) says who may call."""
    access = access or Access()
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
    mrc = service.routes.get("mrc")
    types = request_types(lim, mrc.predictor.inner.settings.n_best if mrc is not None else MRCSettings.n_best)
    app.add_middleware(BodyLimit, limit=lim.max_body_bytes, timeout_s=lim.body_timeout_s)
    app.add_middleware(ConcurrencyLimit, limit=lim.max_concurrent_requests)
    app.add_middleware(Guard, access=access)  # added last: runs first

    @app.exception_handler(ApiError)
    async def _api_error(request, e: ApiError):
        return _error(e.status, e.message, e.field, e.headers, e.problems)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, e: RequestValidationError):
        return client_error(e, request.headers.get("content-type"))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request, e: StarletteHTTPException):
        if e.status_code == 400 and e.__cause__ is not None:  # FastAPI could not read the body as JSON
            return _error(400, _unreadable(e.__cause__), "body")
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

    statuses = (400, 401, 404, 408, 413, 415, 422, 429, 503) if access.api_keys else \
        (400, 404, 408, 413, 415, 422, 429, 503)
    errors = {status: {"model": ErrorBody} for status in statuses}

    for ep, (_, result_cls) in ITEM_OF.items():
        # an endpoint no loaded model serves still answers (404 naming the head it needs) but is not
        # described: the schema lists what this service does
        app.post(f"/v1/{ep}", summary=f"{ep}: one object, or a list of objects (answers come back in order)",
                 response_model=None, include_in_schema=ep in service.routes,
                 responses={200: {"model": Union[result_cls, list[result_cls]],
                                  "description": "one result for one object, a list of results (in order) for a "
                                                 "list"},
                            **errors}
                 )(_item_endpoint(ep, types.items[ep], _route_of(service, ep), lim))

    @app.post("/v1/embed", summary="embed: sentence vectors for a list of texts", response_model=None,
              include_in_schema="embed" in service.routes, responses={200: {"model": EmbedResult}, **errors})
    async def embed(request: Request, body: Annotated[types.embed, Body()],
                    route: Annotated[Route, Depends(_route_of(service, "embed"))]):
        if (body.texts is None) == (body.text is None):
            field = "texts" if body.texts is None else "text"
            raise ApiError(422, f"{field}: give texts (a list of strings) or text (one string)"
                                + (", not both" if body.texts is not None else ""), field)
        # an item's error names texts[i] in a list, text itself for one text (the pipeline's field name)
        texts, prefix = (body.texts, "texts") if body.texts is not None else ([body.text], None)
        items = [{"text": t, "pooling": body.pooling, "normalize": body.normalize} for t in texts]
        results = await _answer(request, route, items, prefix, lim)
        return {"vectors": [r["vector"] for r in results], "dim": len(results[0]["vector"]),
                "truncated": [r["truncated"] for r in results], "model": route.model_name}

    return app


def _route_of(service: Service, ep: str):
    """The dependency that gives an endpoint's route: 404 (before the body is validated) when no loaded
    model serves it."""
    async def route() -> Route:
        found = service.routes.get(ep)
        if found is None:
            need = " or ".join(heads_of(endpoint_kind(ep).pipeline)) or "any"
            raise ApiError(404, f"/v1/{ep}: no loaded model serves it (load one with a {need} head)")
        return found

    return route


def _item_endpoint(ep: str, body_type, route_of, lim: Limits):
    async def endpoint(request: Request, body: Annotated[body_type, Body()],
                       route: Annotated[Route, Depends(route_of)]):
        single = not isinstance(body, list)
        dicts = []
        for i, item in enumerate([body] if single else body):
            d = item.model_dump()
            prefix = "" if single else f"[{i}]."
            try:
                route.predictor.check(d)  # what the task needs beyond types (a question that is not blank ...)
            except InputError as e:
                raise ApiError(422, prefix + str(e), prefix + e.field) from None
            dicts.append(d)
        results = await _answer(request, route, dicts, None if single else "", lim)
        return results[0] if single else results

    endpoint.__name__ = ep.replace("-", "_")
    return endpoint


async def _answer(request: Request, route, items: list[dict], list_prefix: Optional[str], lim: Limits) -> list:
    """Run items through the route's batcher; map per-item failures to one HTTP error. The request's
    tokens are counted first (413 over --max-request-tokens). Its work is abandoned (the batcher drops or
    interrupts it) when the deadline passes (503) or the client disconnects."""
    deadline = time.monotonic() + lim.timeout_s
    try:
        # on another thread: a 1 MB body takes a second to tokenize, and the event loop must keep serving
        tokens = await asyncio.to_thread(token_counts, route.predictor, items)
    except (BertfamError, ValueError) as e:
        raise ApiError(422, f"body: cannot be tokenized: {str(e).splitlines()[0] if str(e) else e!r}",
                       "body") from None
    if sum(tokens) > lim.max_request_tokens:
        what = " (every window of a long passage counts, with its question)" if route.endpoint == "mrc" else ""
        raise ApiError(413, f"body: {sum(tokens)} tokens after tokenization{what}, over the limit of "
                            f"{lim.max_request_tokens} per request (--max-request-tokens)", "body")
    try:
        futs = await route.batcher.submit(items, tokens)
    except QueueFull as e:
        raise ApiError(429, f"busy: {e}; retry shortly", None, {"Retry-After": "1"}) from None
    answers = asyncio.ensure_future(asyncio.gather(*futs, return_exceptions=True))
    gone = asyncio.ensure_future(_client_gone(request))
    try:
        done, _ = await asyncio.wait({answers, gone}, timeout=max(0.0, deadline - time.monotonic()),
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if answers not in done:
        for f in futs:  # the batcher skips these items, or stops their running batch between model calls
            f.cancel()
        answers.cancel()
        if gone in done:
            log.info("serve: /v1/%s client disconnected; its work is dropped", route.endpoint)
            raise ApiError(499, "client closed the connection")  # nobody reads it; the code is nginx's
        raise ApiError(503, f"timed out after {lim.timeout_s:g} s (--timeout); the service is busy, retry later",
                       None, {"Retry-After": "1"})
    results = answers.result()
    for i, r in enumerate(results):
        if isinstance(r, BaseException):
            raise _item_error(r, i, list_prefix, route.endpoint)
    return results


async def _client_gone(request: Request) -> None:
    """Returns when the client disconnects. The body has been read, so the next ASGI message is the
    disconnect (servers send nothing else before the response; test clients send it after the response)."""
    while True:
        if (await request.receive())["type"] == "http.disconnect":
            return


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
