"""HTTP API: every endpoint, batch bodies, limits, bad bodies (4xx naming the field), failures inside the
model, dynamic batching. Tiny random checkpoints, FastAPI's TestClient (in-process)."""
import asyncio
import json
import math
import re

import pytest
import torch

from .serving_helpers import CLS_LABELS, NER_LABELS, make_tiny_models

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from bertfam.serving import Limits, Service, create_app  # noqa: E402
from bertfam.tasks.pipelines import NERPipeline  # noqa: E402

PASSAGE = "北京，简称“京”，是中华人民共和国的首都，是全国的政治中心、文化中心。故宫和天坛都在北京。"
LIMITS = dict(max_body_bytes=20_000, max_texts=8, max_passage_chars=3000, timeout_s=30.0)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return make_tiny_models(str(tmp_path_factory.mktemp("models")))


@pytest.fixture(scope="module")
def service(dirs):
    return Service.from_dirs([dirs["span"], dirs["classification"], dirs["token"], dirs["mlm"]], Limits(**LIMITS))


@pytest.fixture(scope="module")
def client(service):
    with TestClient(create_app(service), base_url="http://127.0.0.1") as c:
        yield c


def model_of(service, ep):
    return service.routes[ep].predictor.model


# ------------------------------------------------------------------ endpoints
@pytest.mark.parametrize("ep,body", [
    ("mrc", {"question": "中国的首都是哪里？", "passage": PASSAGE}),
    ("classify", {"text": "这家店很好"}),
    ("ner", {"text": "王小明在北京工作"}),
    ("embed", {"texts": ["北京", "上海"]}),
    ("fill-mask", {"text": "北京是中国的[MASK]都。"}),
])
def test_every_endpoint_runs_the_buffer_reusing_encoder(client, ep, body, monkeypatch):
    """Prediction must take the fastest correct path: no autograd, eval mode, so the encoder reuses its
    per-forward scratch buffers (optimize_for_inference, bertfam/modeling/optimize.py); counted, not assumed."""
    from bertfam.modeling import optimize

    made = []
    real = optimize.Scratch
    monkeypatch.setattr(optimize, "Scratch", lambda: made.append(1) or real())
    r = client.post(f"/v1/{ep}", json=body)
    assert r.status_code == 200, r.text
    assert made, f"/v1/{ep} ran the encoder without the scratch buffers (autograd on, or train mode)"


def test_health_lists_models_endpoints_and_limits(client):
    h = client.get("/health").json()
    assert h["status"] == "ok"
    assert h["endpoints"] == {"mrc": "span", "embed": "span", "classify": "classification", "ner": "token",
                              "fill-mask": "mlm"}
    assert [m["task"] for m in h["models"]] == ["span", "classification", "token", "mlm"]
    assert h["limits"]["max_texts"] == 8


def test_docs_and_openapi_describe_every_endpoint(client):
    r = client.get("/docs")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    # works offline: no CDN script or style (FastAPI's Swagger UI page loads both), only /openapi.json
    assert not re.search(r"https?://", r.text) and "//cdn" not in r.text
    assert "/openapi.json" in r.text
    assert client.get("/redoc").status_code == 404  # its page would load from a CDN too
    assert "/docs" not in client.get("/openapi.json").json()["paths"]
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]

    def resolve(schema):  # FastAPI writes each model once under components and refers to it
        ref = schema.get("$ref", "")
        return spec["components"]["schemas"][ref.rsplit("/", 1)[1]] if ref else schema

    for ep in ("mrc", "classify", "ner", "embed", "fill-mask"):
        body = paths[f"/v1/{ep}"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert resolve(body)  # the request schema is documented, not an empty "any"
    mrc = paths["/v1/mrc"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    one, many = mrc["oneOf"]
    assert set(resolve(one)["required"]) == {"question", "passage"}
    # the service's limits are part of the schema: items per list, characters per text field
    assert many["type"] == "array" and many["maxItems"] == LIMITS["max_texts"]
    assert resolve(one)["properties"]["passage"]["maxLength"] == LIMITS["max_passage_chars"]
    embed = resolve(paths["/v1/embed"]["post"]["requestBody"]["content"]["application/json"]["schema"])
    texts = embed["properties"]["texts"]  # optional (one text may come as `text`): a list or null
    [array] = [t for t in texts.get("anyOf", [texts]) if t.get("type") == "array"]
    assert array["maxItems"] == LIMITS["max_texts"] and "text" in embed["properties"]
    # the blank rule is in the schema: every text field needs one character that is not blank
    from bertfam.tasks.blank import NOT_BLANK

    assert resolve(one)["properties"]["question"]["pattern"] == NOT_BLANK
    assert array["items"]["pattern"] == NOT_BLANK
    # a list body gets a list back, and the 200 schema says so
    ok = paths["/v1/mrc"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    kinds = ok.get("anyOf") or ok.get("oneOf")
    assert kinds[0]["$ref"].endswith("/MRCResult") and kinds[1]["items"]["$ref"].endswith("/MRCResult")


def test_index_page_is_self_contained(client):
    r = client.get("/")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    html = r.text
    assert "无答案" in html and 'id="question"' in html and 'id="passage"' in html
    for ref in ("src=\"http", "href=\"http", "src=\"//", "href=\"//", "@import", "url(http"):
        assert ref not in html
    # the pages' shared script (the API-key prompt) is included into each page as it is served
    docs = client.get("/docs").text
    for page in (html, docs):
        assert page.count("function withKey(") == 1 and "@include" not in page


def _assert_span_in(passage: str, a: dict) -> None:
    """An answer is the passage's characters [start, end); a non-answer carries no text and no offsets."""
    if a["answerable"]:
        assert 0 <= a["start"] < a["end"] <= len(passage), a
        assert passage[a["start"]:a["end"]] == a["answer"], a
    else:
        assert a["answer"] is None and a["start"] is None and a["end"] is None, a


def test_mrc_single_batch_and_long_passage_match_the_mrc_predictor(client, service):
    from bertfam.tasks.mrc import MRCPredictor, settings_of

    r = client.post("/v1/mrc", json={"question": "中国的首都是哪里？", "passage": PASSAGE, "title": "北京"})
    assert r.status_code == 200
    a = r.json()
    assert set(a) == {"answer", "start", "end", "score", "answerable"}
    _assert_span_in(PASSAGE, a)
    long_passage = PASSAGE * 20  # ~900 characters: many 128-token windows
    items = [{"question": "故宫在哪里？", "passage": long_passage}, {"question": "首都？", "passage": PASSAGE}]
    batch = client.post("/v1/mrc", json=items).json()
    assert isinstance(batch, list) and len(batch) == 2
    # the service adds no decoding of its own: same answers as the MRC predictor called directly
    model = model_of(service, "mrc")
    direct = MRCPredictor(model, settings_of(model, max_length=128, doc_stride=64)).predict_batch(items)
    for got, want in zip(batch, direct):
        assert (got["answer"], got["start"], got["end"], got["answerable"]) == \
            (want.answer, want.start, want.end, want.answerable)
        assert got["score"] == pytest.approx(want.score, rel=1e-4, abs=1e-6)
    for item, got in zip(items, batch):  # offsets index the passage, whichever window answered
        _assert_span_in(item["passage"], got)


def test_mrc_top_k_gives_candidates_only_to_the_items_that_ask(client, service):
    """top_k: the k best spans (offsets into the passage, best first), also for a declined question; an item
    without top_k gets no candidates even in the same batch; 0, a non-integer or more than n_best is a 422."""
    items = [{"question": "中国的首都是哪里？", "passage": PASSAGE, "top_k": 3},
             {"question": "首都？", "passage": PASSAGE}]
    got = client.post("/v1/mrc", json=items).json()
    assert "candidates" not in got[1] and set(got[1]) == {"answer", "start", "end", "score", "answerable"}
    cands = got[0]["candidates"]
    assert 1 <= len(cands) <= 3
    assert [c["score"] for c in cands] == sorted((c["score"] for c in cands), reverse=True)
    for c in cands:
        assert PASSAGE[c["start"]:c["end"]] == c["text"]
    if got[0]["answerable"]:  # the answer is the best candidate
        assert (cands[0]["text"], cands[0]["start"]) == (got[0]["answer"], got[0]["start"])
    alone = client.post("/v1/mrc", json=items[0]).json()  # batching changes nothing
    assert [c["text"] for c in alone["candidates"]] == [c["text"] for c in cands]
    whole = client.post("/v1/mrc", json={**items[0], "top_k": 2.0}).json()  # JSON's integer 2.0 is 2
    assert len(whole["candidates"]) <= 2
    n_best = model_of(service, "mrc").config.head.mrc_settings.n_best
    for bad in (0, "3", 2.5, True, n_best + 1):
        r = client.post("/v1/mrc", json={**items[0], "top_k": bad})
        assert r.status_code == 422 and r.json()["field"] == "top_k", (bad, r.json())


def test_classify_probabilities_pairs_order_and_truncation(client, service):
    texts = [{"text": "很好吃"}, {"text": "不好吃", "text_pair": "难吃"}, {"text": "一般" * 400}]
    batch = client.post("/v1/classify", json=texts).json()
    assert len(batch) == 3
    for item, res in zip(texts, batch):  # batch order kept, pair and single texts mixed
        alone = client.post("/v1/classify", json=item).json()
        assert res["label"] == alone["label"]
        assert res["probabilities"] == pytest.approx(alone["probabilities"], abs=1e-5)
        probs = res["probabilities"]
        assert list(probs) == CLS_LABELS and math.isclose(sum(probs.values()), 1.0, rel_tol=1e-5)
        assert res["label"] == max(probs, key=probs.get) and res["score"] == probs[res["label"]]
    assert [r["truncated"] for r in batch] == [False, False, True]
    tok = model_of(service, "classify").tokenizer
    enc = tok("很好吃")
    with torch.no_grad():
        want = torch.softmax(model_of(service, "classify")(**enc).logits[0], -1)
    assert list(batch[0]["probabilities"].values()) == pytest.approx(want.tolist(), abs=1e-5)


def test_ner_entities_are_character_spans_also_across_windows(client):
    text = "李明在北京大学读书，王芳去了上海。"
    r = client.post("/v1/ner", json={"text": text}).json()
    types = {lab[2:] for lab in NER_LABELS if lab != "O"}
    for e in r["entities"]:
        assert e["text"] == text[e["start"]:e["end"]] and e["type"] in types and 0 < e["score"] <= 1
    long_text = text * 20  # 340 characters: 128-token windows overlapping by 32
    ents = client.post("/v1/ner", json={"text": long_text}).json()["entities"]
    assert ents and all(e["text"] == long_text[e["start"]:e["end"]] for e in ents)
    assert all(a["end"] <= b["start"] for a, b in zip(ents, ents[1:]))  # ordered, non-overlapping
    assert ents[-1]["end"] > len(text) * 15  # the end of the text was read, not truncated away


def test_ner_decoding_of_tags_into_character_spans():
    # token character spans -> (context, tag id, prob); tags: B-PER I-PER O B-LOC, then a bare I-LOC
    tokens = {(0, 1): (0, 1, 0.9), (1, 2): (0, 2, 0.7), (2, 3): (0, 0, 0.99), (3, 4): (0, 3, 0.8),
              (4, 5): (0, 4, 0.6), (6, 7): (0, 4, 0.5)}
    ents = NERPipeline._entities("李明在北京 上", tokens, NER_LABELS)
    assert [(e["type"], e["text"], e["start"], e["end"]) for e in ents] == \
        [("PER", "李明", 0, 2), ("LOC", "北京 上", 3, 7)]
    assert ents[0]["score"] == pytest.approx(0.8)


def test_fill_mask_top_k_per_mask(client, service):
    r = client.post("/v1/fill-mask", json={"text": "北京是中国的[MASK]都，上海在[MASK]边。", "top_k": 3}).json()
    assert len(r["predictions"]) == 2 and all(len(p) == 3 for p in r["predictions"])
    for cands in r["predictions"]:
        scores = [c["score"] for c in cands]
        assert scores == sorted(scores, reverse=True) and all(0 < s < 1 for s in scores)
    model = model_of(service, "fill-mask")
    tok = model.tokenizer
    enc = tok("北京是中国的[MASK]都，上海在[MASK]边。")
    with torch.no_grad():
        logits = model(**enc).logits[0]  # (T, V)
    pos = (enc["input_ids"][0] == tok.mask_token_id).nonzero()[0, 0]
    assert r["predictions"][0][0]["id"] == int(logits[pos].argmax())
    assert r["predictions"][0][0]["token"] == tok.id_to_token(int(logits[pos].argmax()))


def test_embed_takes_text_as_every_other_endpoint_does(client):
    one = client.post("/v1/embed", json={"text": "北京"})
    assert one.status_code == 200, one.text
    assert one.json()["vectors"] == client.post("/v1/embed", json={"texts": ["北京"]}).json()["vectors"]
    assert one.json()["truncated"] == [False]


def test_embed_vectors_norms_pooling_and_batch_invariance(client):
    texts = ["今天天气很好", "今天天气很好", "明天会下雨吗？我们要不要带伞"]
    r = client.post("/v1/embed", json={"texts": texts}).json()
    v = torch.tensor(r["vectors"])
    assert v.shape == (3, r["dim"]) and r["model"] == "span"
    assert torch.allclose(v.norm(dim=1), torch.ones(3), atol=1e-5)
    assert torch.allclose(v[0], v[1], atol=1e-6)
    alone = torch.tensor(client.post("/v1/embed", json={"texts": [texts[0]]}).json()["vectors"][0])
    assert torch.allclose(alone, v[0], atol=1e-5)  # padding in the batch changes nothing
    raw = client.post("/v1/embed", json={"texts": texts[:1], "normalize": False, "pooling": "cls"}).json()
    assert abs(torch.tensor(raw["vectors"][0]).norm().item() - 1.0) > 1e-3


# ------------------------------------------------------------------ bad input: 4xx naming the field
BAD = [
    ("mrc", '{"question": 1, "passage": "x"}', 422, "question"),
    ("mrc", '{"question": "q"}', 422, "passage"),
    ("mrc", '{"question": "q", "passage": "p", "qestion": "typo"}', 422, "qestion"),
    ("mrc", '{"question": "q", "passage": "p", "title": 5}', 422, "title"),
    ("mrc", '[{"question": "q", "passage": "p"}, {"question": "q"}]', 422, "[1].passage"),
    ("mrc", '[{"question": "q", "passage": "p"}, 7]', 422, "[1]"),
    ("mrc", '{"question": "   ", "passage": "p"}', 422, "question"),
    ("mrc", '{"question": "q", "passage": ""}', 422, "passage"),
    # one blank rule (tasks/blank.py): whitespace of any kind, zero-width, NUL, control characters
    ("mrc", '{"question": "\\u200b\\u200b", "passage": "p"}', 422, "question"),
    ("mrc", '{"question": "q", "passage": "\\u200b\\u200b"}', 422, "passage"),
    ("mrc", '[{"question": "q", "passage": "p"}, {"question": "q", "passage": "\\u0000"}]', 422, "[1].passage"),
    ("classify", '{"text": "   "}', 422, "text"),
    ("classify", '{"text": "\\u0000\\u0007"}', 422, "text"),
    ("classify", '{"text": "a", "text_pair": "\\u3000\\n"}', 422, "text_pair"),
    ("classify", '[{"text": "a"}, {"text": "\\ufeff"}]', 422, "[1].text"),
    ("ner", '{"text": "\\t\\u2028\\u00a0"}', 422, "text"),
    ("fill-mask", '{"text": ""}', 422, "text"),
    ("embed", '{"texts": ["a", "\\u200d"]}', 422, "texts[1]"),
    ("mrc", '{"question": "\\ud800", "passage": "p"}', 422, "question"),
    ("mrc", "[]", 422, "body"),
    ("mrc", "null", 422, "body"),
    ("mrc", '"just a string"', 422, "body"),
    ("mrc", "{'single': 'quotes'}", 400, "body"),
    ("mrc", '{"question": "q", "passage": "p"', 400, "body"),
    ("mrc", "", 400, "body"),
    ("mrc", "[" * 100_000, 413, "body"),
    ("mrc", "[" * 15_000, 400, "body"),  # nested too deeply for the JSON parser
    ("classify", '{"text": ["a", "b"]}', 422, "text"),
    ("classify", '{"text": "a", "text_pair": 3}', 422, "text_pair"),
    ("classify", '{"texts": "a"}', 422, "text"),
    ("ner", '{"text": null}', 422, "text"),
    ("ner", '{"text": {"nested": "object"}}', 422, "text"),
    ("fill-mask", '{"text": "no mask here"}', 422, "text"),
    ("fill-mask", '{"text": "[MASK]", "top_k": 0}', 422, "top_k"),
    ("fill-mask", '{"text": "[MASK]", "top_k": "5"}', 422, "top_k"),
    ("fill-mask", '{"text": "[MASK]", "top_k": 1e9}', 422, "top_k"),
    ("embed", '{"texts": []}', 422, "texts"),
    ("embed", '{"texts": ["a", 2]}', 422, "texts[1]"),
    ("embed", '{"texts": "a"}', 422, "texts"),
    ("embed", '{"texts": ["a"], "pooling": "max"}', 422, "pooling"),
    ("embed", '[{"texts": ["a"]}]', 422, "body"),
    ("embed", '{}', 422, "texts"),
    ("embed", '{"text": "a", "texts": ["b"]}', 422, "text"),
    ("embed", '{"text": ["a"]}', 422, "text"),
]


@pytest.mark.parametrize("ep,body,status,field", BAD)
def test_bad_bodies_get_4xx_naming_the_field(client, ep, body, status, field):
    r = client.post(f"/v1/{ep}", content=body.encode("utf-8"), headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()
    assert err["field"] == field and err["error"].startswith(field + ":"), err


def test_bytes_that_are_not_utf8_or_not_json(client):
    for raw in (b"\xff\xfe\x00garbage", bytes(range(256)), b"\x00" * 64):
        r = client.post("/v1/classify", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["field"] == "body"
    assert client.get("/health").status_code == 200


def test_unknown_routes_and_methods_are_4xx_json(client):
    r = client.post("/v1/nope", json={})
    assert r.status_code == 404 and "error" in r.json()
    assert client.get("/v1/mrc").status_code == 405


# ------------------------------------------------------------------ limits
def test_body_size_limit_with_and_without_content_length(client):
    big = json.dumps({"question": "q", "passage": "字" * 9000})  # 27 kB in UTF-8 > 20 kB
    r = client.post("/v1/mrc", content=big.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["field"] == "body" and "20000 bytes" in r.json()["error"]

    def chunks():  # no Content-Length: chunked transfer, counted as it arrives
        for _ in range(30):
            yield b" " * 1000
    r = client.post("/v1/mrc", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_texts_per_request_and_passage_length_limits(client):
    item = {"text": "好"}
    assert client.post("/v1/classify", json=[item] * 8).status_code == 200
    r = client.post("/v1/classify", json=[item] * 9)
    assert r.status_code == 413 and r.json()["field"] == "body" and "8" in r.json()["error"]
    r = client.post("/v1/embed", json={"texts": ["好"] * 9})
    assert r.status_code == 413 and r.json()["field"] == "texts"
    r = client.post("/v1/mrc", json=[{"question": "q", "passage": "p"}, {"question": "q", "passage": "长" * 3001}])
    assert r.status_code == 422 and r.json()["field"] == "[1].passage" and "3000" in r.json()["error"]
    # a passage over the model window (128 tokens) but under the limit is answered through windows
    assert client.post("/v1/mrc", json={"question": "q", "passage": "长" * 2900}).status_code == 200


def _slow(service, ep, seconds):
    """Make the endpoint's predictor sleep (a stand-in for a slow model)."""
    pred = service.routes[ep].predictor
    orig = pred.predict_batch

    def slow(items):
        import time

        time.sleep(seconds)
        return orig(items)
    return pred, orig, slow


def test_request_timeout_is_503_and_the_service_recovers(dirs):
    svc = Service.from_dirs([dirs["classification"]], Limits(timeout_s=0.3))
    pred, orig, slow = _slow(svc, "classify", 1.0)
    svc.routes["classify"].batcher.fn = slow
    with TestClient(create_app(svc), base_url="http://127.0.0.1") as c:
        r = c.post("/v1/classify", json={"text": "好"})
        assert r.status_code == 503 and "timed out" in r.json()["error"] and r.headers["retry-after"] == "1"
        svc.routes["classify"].batcher.fn = orig
        import time

        time.sleep(1.0)  # the slow call that timed out still holds the model thread until it ends
        assert c.post("/v1/classify", json={"text": "好"}).status_code == 200


def test_queue_limit_is_429(dirs):
    svc = Service.from_dirs([dirs["classification"]], Limits(max_queue=2, max_batch=1, batch_wait_ms=0))
    _, _, slow = _slow(svc, "classify", 0.5)
    svc.routes["classify"].batcher.fn = slow
    app = create_app(svc)

    async def burst():
        import httpx

        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
            return await asyncio.gather(*(c.post("/v1/classify", json={"text": "好"}) for _ in range(6)))
    codes = sorted(r.status_code for r in asyncio.run(burst()))
    assert 429 in codes and 200 in codes and all(c in (200, 429) for c in codes)


# ------------------------------------------------------------------ failures inside the model
def test_an_item_that_breaks_the_model_fails_alone(client, service):
    batcher = service.routes["classify"].batcher
    orig = batcher.fn

    def fragile(items):
        if any(it["text"] == "BOOM" for it in items):
            raise ValueError("the model refused this text")
        if any(it["text"] == "CRASH" for it in items):
            raise RuntimeError("a bug in the model code")
        return orig(items)
    batcher.fn = fragile
    try:
        r = client.post("/v1/classify", json=[{"text": "好"}, {"text": "BOOM"}])
        assert r.status_code == 422 and r.json()["field"] == "[1]" and "refused" in r.json()["error"]
        r = client.post("/v1/classify", json={"text": "CRASH"})  # a bug: 500, JSON, one line, nothing leaks
        assert r.status_code == 500 and "RuntimeError" in r.json()["error"] and "Traceback" not in r.text
        # items batched together with a failing one still get their answers
        app = client.app

        async def together():
            import httpx

            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
                return await asyncio.gather(*(c.post("/v1/classify", json={"text": t})
                                              for t in ["好", "BOOM", "坏", "CRASH", "行"]))
        codes = [r.status_code for r in asyncio.run(together())]
        assert codes == [200, 422, 200, 500, 200]
    finally:
        batcher.fn = orig
    assert client.post("/v1/classify", json={"text": "好"}).status_code == 200


def test_endpoint_without_a_model_is_404_with_a_hint(dirs):
    with TestClient(create_app(Service.from_dirs([dirs["classification"]])), base_url="http://127.0.0.1") as c:
        r = c.post("/v1/mrc", json={"question": "q", "passage": "p"})
        assert r.status_code == 404 and "span" in r.json()["error"]
        # and the schema lists only what is served
        assert sorted(c.get("/openapi.json").json()["paths"]) == ["/health", "/v1/classify", "/v1/embed"]
        assert c.post("/v1/embed", json={"texts": ["好"]}).json()["model"] == "classification"


# ------------------------------------------------------------------ dynamic batching
def test_concurrent_requests_share_model_calls(dirs):
    svc = Service.from_dirs([dirs["classification"]], Limits(batch_wait_ms=50, max_batch=16))
    app = create_app(svc)
    texts = [f"第{i}条评论，味道不错" for i in range(12)]

    async def burst():
        import httpx

        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
            return await asyncio.gather(*(c.post("/v1/classify", json={"text": t}) for t in texts))
    results = asyncio.run(burst())
    b = svc.routes["classify"].batcher
    assert b.items == 12 and b.batches < 12  # arrived together -> fewer model calls than requests
    with TestClient(app, base_url="http://127.0.0.1") as c:  # and batching changed no answer
        for t, r in zip(texts, results):
            assert r.json()["probabilities"] == pytest.approx(
                c.post("/v1/classify", json={"text": t}).json()["probabilities"], abs=1e-5)
