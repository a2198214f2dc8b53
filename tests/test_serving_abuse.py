"""The service under abuse, against a real uvicorn on loopback: token budgets (413), the concurrency cap
(429), abandoned work that stops holding the model (client gone, deadline passed).

The tiny span model is made slow on purpose (every forward sleeps), so "the model is busy" is measured in
model calls and seconds, not assumed."""
import threading
import time

import pytest

from .serving_helpers import LiveServer, make_tiny_models

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from bertfam.serving import Limits, Service, create_app  # noqa: E402

CALL_S = 0.05  # each forward of the slowed model
# ~3000 characters: with 128-token windows one token per character, ~50 windows, one per model call below
HEAVY = {"question": "这段话说了什么？", "passage": "北京是中华人民共和国的首都，也是全国的政治中心。" * 125}
LIGHT = {"question": "首都是哪里？", "passage": "北京是首都。"}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return make_tiny_models(str(tmp_path_factory.mktemp("models")))


class SlowModel:
    """Wraps the span model's forward: sleeps CALL_S per call and counts the calls."""

    def __init__(self, service):
        self.model = service.routes["mrc"].predictor.inner.models[0]
        self.calls = 0
        real = self.model.forward

        def forward(*a, **k):
            self.calls += 1
            time.sleep(CALL_S)
            return real(*a, **k)
        self.model.forward = forward


def serve(dirs, **limits):
    # a batch budget of one 128-token window: each model call reads one window, so an abandoned heavy
    # request can stop after any of its ~50 calls
    svc = Service.from_dirs([dirs["span"]], Limits(**{"max_batch_tokens": 128, **limits}))
    return svc, SlowModel(svc), LiveServer(create_app(svc))


def test_a_client_that_disconnects_frees_the_model_within_one_batch(dirs):
    svc, slow, live = serve(dirs)
    with live:
        with pytest.raises(httpx.ReadTimeout):  # the client gives up after 0.5 s and closes its connection
            httpx.post(live.url + "/v1/mrc", json=HEAVY, timeout=0.5)
        t = time.monotonic()
        r = httpx.post(live.url + "/v1/mrc", json=LIGHT, timeout=30)
        waited = time.monotonic() - t
        assert r.status_code == 200, r.text
        calls = slow.calls
        time.sleep(0.5)
        assert slow.calls == calls  # nothing more runs for the heavy request
        # the heavy request alone would be ~50 calls (2.5 s); it stopped after a few
        assert calls < 30, calls
        assert waited < 1.5, waited
        stats = httpx.get(live.url + "/health").json()["batching"]["mrc"]
        assert stats["interrupted"] == 1 and stats["batches"] == 1


def test_a_request_past_its_deadline_is_503_and_stops_running(dirs):
    svc, slow, live = serve(dirs, timeout_s=0.5)
    with live:
        t = time.monotonic()
        r = httpx.post(live.url + "/v1/mrc", json=HEAVY, timeout=30)
        assert r.status_code == 503 and "--timeout" in r.json()["error"] and r.headers["retry-after"] == "1"
        assert time.monotonic() - t < 2
        assert httpx.post(live.url + "/v1/mrc", json=LIGHT, timeout=30).status_code == 200
        calls = slow.calls
        time.sleep(0.5)
        assert slow.calls == calls and calls < 30, calls


def test_request_token_budget_counts_every_window_and_is_413(dirs):
    svc, slow, live = serve(dirs, max_request_tokens=1000)
    with live:
        # ~3000 characters: under --max-passage-chars, but ~50 windows of 128 tokens = ~6000 tokens
        r = httpx.post(live.url + "/v1/mrc", json=HEAVY, timeout=30)
        assert r.status_code == 413, r.text
        err = r.json()
        assert err["field"] == "body" and "--max-request-tokens" in err["error"] and "1000" in err["error"]
        assert slow.calls == 0  # refused before the model saw it
        n = int(err["error"].split(": ")[1].split()[0])
        assert 5000 < n < 8000, err  # every window counted, each with its question
        assert httpx.post(live.url + "/v1/mrc", json=LIGHT, timeout=30).status_code == 200


def test_concurrent_request_cap_is_429_with_retry_after(dirs):
    svc, slow, live = serve(dirs, max_concurrent_requests=1)
    with live:
        first = {}
        t = threading.Thread(target=lambda: first.update(r=httpx.post(live.url + "/v1/mrc", json=HEAVY, timeout=30)))
        t.start()
        while slow.calls == 0:  # the heavy request is in progress
            time.sleep(0.01)
        r = httpx.post(live.url + "/v1/mrc", json=LIGHT, timeout=30)
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert "--max-concurrent-requests" in r.json()["error"]
        assert httpx.get(live.url + "/health").status_code == 200  # only /v1 requests count
        t.join(30)
        assert first["r"].status_code == 200
        assert httpx.post(live.url + "/v1/mrc", json=LIGHT, timeout=30).status_code == 200


def test_batches_respect_the_token_budget():
    """Items are packed into a batch while their tokens fit --max-batch-tokens; the next starts a batch."""
    import asyncio
    import concurrent.futures

    from bertfam.serving.batching import DynamicBatcher

    seen = []
    ex = concurrent.futures.ThreadPoolExecutor(1)
    b = DynamicBatcher(lambda items: seen.append(list(items)) or items, ex, max_batch=10, wait_ms=20,
                       max_batch_tokens=100)

    async def go():
        futs = await b.submit(["a", "b", "c", "d", "e"], tokens=[60, 30, 20, 150, 10])
        return await asyncio.gather(*futs)
    assert asyncio.run(go()) == ["a", "b", "c", "d", "e"]
    ex.shutdown()
    # 60+30 fit, +20 would not; 20 alone, +150 would not; 150 runs alone (over the budget by itself)
    assert seen == [["a", "b"], ["c"], ["d"], ["e"]]
