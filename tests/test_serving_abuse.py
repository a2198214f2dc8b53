"""The service under abuse, against a real uvicorn on loopback: token budgets (413), the concurrency cap
(429), abandoned work that stops holding the model (client gone, deadline passed).

The tiny span model is made slow on purpose (every forward sleeps), so "the model is busy" is measured in
model calls and seconds, not assumed."""
import threading
import time

import pytest

from .serving_helpers import LiveServer, free_port, make_tiny_models

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from bertfam.serving import Limits, Service, create_app  # noqa: E402

# each forward of the slowed model: the heavy request alone is then >= 50 x 0.2 = 10 s of model time, far
# above the bounds below even on a loaded 2-core machine (where a plain request can take a second or two)
CALL_S = 0.2
# ~3000 characters: with 128-token windows one token per character, ~50 windows, one per model call below
HEAVY = {"question": "这段话说了什么？", "passage": "北京是中华人民共和国的首都，也是全国的政治中心。" * 125}
LIGHT = {"question": "首都是哪里？", "passage": "北京是首都。"}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return make_tiny_models(str(tmp_path_factory.mktemp("models")))


class SlowModel:
    """Wraps the span model's forward: sleeps CALL_S per call and counts the calls."""

    def __init__(self, service, call_s: float = CALL_S):
        self.model = service.routes["mrc"].predictor.inner.models[0]
        self.calls = 0
        real = self.model.forward

        def forward(*a, **k):
            self.calls += 1
            time.sleep(call_s)
            return real(*a, **k)
        self.model.forward = forward


def serve(dirs, call_s: float = CALL_S, **limits):
    # a batch budget of one 128-token window: each model call reads one window, so an abandoned heavy
    # request can stop after any of its ~50 calls
    svc = Service.from_dirs([dirs["span"]], Limits(**{"max_batch_tokens": 128, **limits}))
    return svc, SlowModel(svc, call_s), LiveServer(create_app(svc))


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
        # the heavy request alone would be ~50 calls (10 s); it stopped after a few, and the light one
        # waited for one call of it at most, not for the rest
        assert calls < 30, calls
        assert waited < 5, waited
        stats = httpx.get(live.url + "/health").json()["batching"]["mrc"]
        assert stats["interrupted"] == 1 and stats["batches"] == 1


def test_a_request_past_its_deadline_is_503_and_stops_running(dirs):
    svc, slow, live = serve(dirs, timeout_s=0.5)
    with live:
        t = time.monotonic()
        r = httpx.post(live.url + "/v1/mrc", json=HEAVY, timeout=30)
        assert r.status_code == 503 and "--timeout" in r.json()["error"] and r.headers["retry-after"] == "1"
        assert time.monotonic() - t < 5  # the 0.5 s deadline, not the heavy request's 10 s
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
    svc, slow, live = serve(dirs, call_s=0.02, max_concurrent_requests=1)  # the heavy request runs to its end
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


# ------------------------------------------------------------------ who may call
def test_host_allow_list_refuses_other_names(dirs):
    with LiveServer(create_app(Service.from_dirs([dirs["classification"]]))) as live:
        # DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1 sends its own Host
        r = httpx.get(live.url + "/health", headers={"Host": "evil.example"})
        assert r.status_code == 400 and r.json()["field"] == "Host" and "evil.example" in r.json()["error"]
        r = httpx.post(live.url + "/v1/classify", json={"text": "好"}, headers={"Host": f"evil.example:{live.port}"})
        assert r.status_code == 400
        for name in ("127.0.0.1", "localhost", "[::1]", "LOCALHOST"):
            assert httpx.get(live.url + "/health", headers={"Host": f"{name}:{live.port}"}).status_code == 200, name


def test_every_post_needs_a_json_content_type(dirs):
    with LiveServer(create_app(Service.from_dirs([dirs["classification"]]))) as live:
        body = b'{"text": "\xe5\xa5\xbd"}'
        # what a page on any site may POST without a CORS preflight: no type, text/plain, a form
        for ctype in (None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            headers = {"Content-Type": ctype} if ctype else {}
            r = httpx.post(live.url + "/v1/classify", content=body, headers=headers)
            assert r.status_code == 415, (ctype, r.text)
            assert r.json()["field"] == "Content-Type" and "application/json" in r.json()["error"]
        for ctype in ("application/json", "application/json; charset=utf-8", "application/vnd.api+json"):
            r = httpx.post(live.url + "/v1/classify", content=body, headers={"Content-Type": ctype})
            assert r.status_code == 200, (ctype, r.text)


def test_api_key_is_required_as_a_bearer_token(dirs):
    from bertfam.serving.app import Access

    app = create_app(Service.from_dirs([dirs["classification"]]), Access(api_keys=("s3cret-key",)))
    with LiveServer(app) as live:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-key"},
                        {"Authorization": "Basic s3cret-key"}):
            r = httpx.post(live.url + "/v1/classify", json={"text": "好"}, headers=headers)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", headers
            assert r.json()["field"] == "Authorization"
            assert httpx.get(live.url + "/health", headers=headers).status_code == 401
            assert httpx.get(live.url + "/openapi.json", headers=headers).status_code == 401
        good = {"Authorization": "Bearer s3cret-key"}
        assert httpx.post(live.url + "/v1/classify", json={"text": "好"}, headers=good).status_code == 200
        assert httpx.get(live.url + "/health", headers=good).status_code == 200
        # the pages hold no data: they load, then ask for the key (their requests carry it)
        assert httpx.get(live.url + "/").status_code == 200 and httpx.get(live.url + "/docs").status_code == 200
        assert "Authorization" in httpx.get(live.url + "/").text


def test_serve_on_a_public_address_needs_a_key_or_insecure_no_auth(tmp_path, capsys, monkeypatch):
    from bertfam.cli import main

    monkeypatch.delenv("BERTFAM_API_KEY", raising=False)
    missing = str(tmp_path / "no-model")
    assert main(["serve", "--model", missing, "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--api-key" in err and "--insecure-no-auth" in err
    assert main(["serve", "--model", missing, "--host", "0.0.0.0", "--api-key-file", str(tmp_path / "nokey")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nokey" in err
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert main(["serve", "--model", missing, "--api-key-file", str(empty)]) == 2
    assert "empty" in capsys.readouterr().err
    # with a key (or the explicit opt-out) the address is accepted: the next failure is the model directory
    key = tmp_path / "key"
    key.write_text("k\n")
    for extra in (["--api-key-file", str(key)], ["--insecure-no-auth"]):
        assert main(["serve", "--model", missing, "--host", "0.0.0.0", "--port", str(free_port()), *extra]) == 2
        err = capsys.readouterr().err
        assert "no-model" in err and "--api-key" not in err, err


# ------------------------------------------------------------------ slow clients
def _closed_by_server(sock, within: float) -> float:
    """Seconds until the server closes `sock` (recv gives b""); fails if it stays open `within` s."""
    import socket

    sock.settimeout(within)
    t = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except socket.timeout:
        pytest.fail(f"the server kept the connection open for {within} s")
    except ConnectionResetError:
        pass
    return time.monotonic() - t


def test_slow_headers_and_bodies_are_cut(dirs):
    import socket

    svc = Service.from_dirs([dirs["classification"]], Limits(header_timeout_s=0.5, body_timeout_s=0.5, keep_alive_s=0.5))
    with LiveServer(create_app(svc)) as live:
        addr = ("127.0.0.1", live.port)
        with socket.create_connection(addr) as s:  # a client that never finishes its headers
            s.sendall(b"POST /v1/classify HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
            assert _closed_by_server(s, 5) < 2
        with socket.create_connection(addr) as s:  # ... or its body
            s.sendall(b"POST /v1/classify HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100\r\n\r\n{\"text\": ")
            s.settimeout(5)
            reply = b""
            t = time.monotonic()
            while chunk := s.recv(4096):  # the answer, then the server closes the connection
                reply += chunk
            assert time.monotonic() - t < 2
            assert reply.startswith(b"HTTP/1.1 408") and b"--body-timeout" in reply, reply
        with socket.create_connection(addr) as s:  # kept alive after an answer: the next headers are timed too
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            s.settimeout(5)
            assert s.recv(65536).startswith(b"HTTP/1.1 200")
            s.sendall(b"GET /heal")
            assert _closed_by_server(s, svc.limits.keep_alive_s + 5) < svc.limits.keep_alive_s + 2
        assert httpx.post(live.url + "/v1/classify", json={"text": "好"}).status_code == 200


def test_connection_cap_closes_extra_connections_and_logs_once(dirs):
    import logging
    import socket

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("bertfam").addHandler(handler)
    svc = Service.from_dirs([dirs["classification"]], Limits(max_connections=4))
    try:
        with LiveServer(create_app(svc)) as live:
            held = [socket.create_connection(("127.0.0.1", live.port)) for _ in range(4)]
            time.sleep(0.2)
            extra = []
            for _ in range(20):  # each refused at once with a bare 503, without being read
                s = socket.create_connection(("127.0.0.1", live.port))
                s.settimeout(5)
                assert s.recv(4096).startswith(b"HTTP/1.1 503")
                extra.append(s)
            refused = [r for r in records if "--max-connections" in r.getMessage()]
            assert len(refused) == 1, [r.getMessage() for r in records]  # one line for 20, not 20 lines
            for s in held + extra:
                s.close()
            time.sleep(0.2)
            assert httpx.get(live.url + "/health").status_code == 200  # room again
    finally:
        logging.getLogger("bertfam").removeHandler(handler)
