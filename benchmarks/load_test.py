"""Load test of `bertfam serve`: concurrent clients mixing valid and invalid requests, on loopback only.

Starts a real server process on a free 127.0.0.1 port (tiny random models unless --model is given), runs
--clients threads x --requests requests each (about half of them invalid: bad JSON, wrong types,
missing or misspelt fields, oversized bodies, too many texts, non-UTF-8 bytes, lone surrogates ...), then
reports throughput, p50/p99 latency, the status histogram, the number of 5xx (must be 0), of dropped
connections (must be 0) and of answers whose status differs from the expected one. Bounded: every request
has a client timeout and the whole run a deadline (--max-seconds). Exit code 1 if any 5xx, drop or
unexpected status.

    .venv/bin/python benchmarks/load_test.py                 # 8 clients x 200 requests, tiny models
    .venv/bin/python benchmarks/load_test.py --model runs/mrc --model runs/tnews --out load.json
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PASSAGE = ("北京，简称“京”，是中华人民共和国的首都，是全国的政治中心、文化中心、国际交往中心和科技创新中心。"
           "故宫、天坛和颐和园都在北京。")
MAX_BODY = 256 * 1024
MAX_TEXTS = 16


def request_mix(endpoints: set[str]) -> list[tuple[str, str, object, int]]:
    """(name, path, body: JSON value or raw bytes, expected status). Invalid bodies for every endpoint."""
    big = {"question": "问题", "passage": "长" * (MAX_BODY // 2)}  # > MAX_BODY bytes in UTF-8
    mix = [
        ("mrc", "/v1/mrc", {"question": "中国的首都是哪里？", "passage": PASSAGE, "title": "北京"}, 200),
        ("mrc-batch", "/v1/mrc", [{"question": "故宫在哪里？", "passage": PASSAGE * 6},
                                  {"question": "首都？", "passage": PASSAGE}], 200),
        ("classify", "/v1/classify", {"text": "这家餐厅的菜很好吃，服务也很周到。"}, 200),
        ("classify-batch", "/v1/classify", [{"text": "好"}, {"text": "不好", "text_pair": "差"}], 200),
        ("ner", "/v1/ner", {"text": "李明在北京大学读书，王芳去了上海。"}, 200),
        ("fill-mask", "/v1/fill-mask", {"text": "北京是中国的[MASK]都。", "top_k": 5}, 200),
        ("embed", "/v1/embed", {"texts": ["今天天气很好", "明天会下雨吗"]}, 200),
        ("bad-json", "/v1/mrc", b'{"question": "q", "passage": ', 400),
        ("not-utf8", "/v1/classify", b"\xff\xfe\xfa garbage", 400),
        ("empty-body", "/v1/ner", b"", 400),
        ("wrong-type", "/v1/mrc", {"question": 42, "passage": PASSAGE}, 422),
        ("missing-field", "/v1/mrc", {"question": "q"}, 422),
        ("typo-field", "/v1/classify", {"txet": "好"}, 422),
        ("lone-surrogate", "/v1/ner", b'{"text": "\\ud800abc"}', 422),
        ("no-mask", "/v1/fill-mask", {"text": "没有遮盖"}, 422),
        ("bad-top-k", "/v1/fill-mask", {"text": "[MASK]", "top_k": -1}, 422),
        ("not-object", "/v1/classify", [1, 2, 3], 422),
        ("too-many-texts", "/v1/embed", {"texts": ["好"] * (MAX_TEXTS + 1)}, 413),
        ("too-big", "/v1/mrc", big, 413),
        ("unknown-path", "/v1/translate", {"text": "好"}, 404),
    ]
    served = {"/v1/mrc": "mrc", "/v1/classify": "classify", "/v1/ner": "ner", "/v1/fill-mask": "fill-mask",
              "/v1/embed": "embed"}
    # valid requests for endpoints no loaded model serves would be 404: leave them out
    return [m for m in mix if m[3] != 200 or served[m[1]] in endpoints]


def start_server(models: list[str], port: int, threads: int, log_path: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "bertfam", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--threads", str(threads), "--max-body-bytes", str(MAX_BODY), "--max-texts", str(MAX_TEXTS)]
    for m in models:
        cmd += ["--model", m]
    log = open(log_path, "w")
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def wait_up(httpx, url: str, proc: subprocess.Popen, seconds: float = 120) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode} before answering")
        try:
            return httpx.get(url + "/health", timeout=2).json()
        except httpx.TransportError:
            time.sleep(0.2)
    raise SystemExit("server did not come up")


def client(httpx, url: str, mix: list, n: int, seed: int, deadline: float, out: list) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=60.0) as c:
        for _ in range(n):
            if time.monotonic() > deadline:
                out.append(("deadline", None, 0.0, None))
                continue
            name, path, body, want = rng.choice(mix)
            kw = {"content": body} if isinstance(body, bytes) else {"json": body}
            t0 = time.perf_counter()
            try:
                r = c.post(path, headers={"content-type": "application/json"}, **kw)
                out.append((name, r.status_code, time.perf_counter() - t0, want))
            except httpx.TimeoutException:
                out.append((name, "timeout", time.perf_counter() - t0, want))
            except httpx.TransportError as e:  # connection reset / closed without a response
                out.append((name, f"dropped:{type(e).__name__}", time.perf_counter() - t0, want))


def percentile(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summarize(results: list, wall: float) -> dict:
    lat = [r[2] for r in results if isinstance(r[1], int)]
    valid = [r[2] for r in results if r[3] == 200 and isinstance(r[1], int)]
    invalid = [r[2] for r in results if r[3] not in (200, None) and isinstance(r[1], int)]
    hist: dict[str, int] = {}
    for r in results:
        hist[str(r[1])] = hist.get(str(r[1]), 0) + 1
    return {
        "requests": len(results), "wall_s": round(wall, 2),
        "throughput_rps": round(len(lat) / wall, 1) if wall > 0 else None,
        "p50_ms": round(1000 * percentile(lat, 50), 1), "p99_ms": round(1000 * percentile(lat, 99), 1),
        "valid_p50_ms": round(1000 * percentile(valid, 50), 1), "valid_p99_ms": round(1000 * percentile(valid, 99), 1),
        "invalid_p50_ms": round(1000 * percentile(invalid, 50), 1),
        "status": dict(sorted(hist.items())),
        "5xx": sum(1 for r in results if isinstance(r[1], int) and r[1] >= 500),
        "dropped": sum(1 for r in results if isinstance(r[1], str) and r[1].startswith("dropped")),
        "timeouts": sum(1 for r in results if r[1] == "timeout"),
        "not_run_deadline": sum(1 for r in results if r[0] == "deadline"),
        "unexpected_status": sum(1 for r in results if isinstance(r[1], int) and r[1] != r[3]),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", help="model directory (default: tiny random models)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=200, help="requests per client")
    ap.add_argument("--threads", type=int, default=1, help="server torch threads")
    ap.add_argument("--max-seconds", type=float, default=900, help="deadline for the whole run")
    ap.add_argument("--out", help="write the summary as JSON here")
    args = ap.parse_args()
    import httpx

    from tests.serving_helpers import free_port

    tmp = tempfile.mkdtemp(prefix="bertfam-load-")
    models = args.model
    if not models:
        from tests.serving_helpers import make_tiny_models

        d = make_tiny_models(tmp)
        models = [d["span"], d["classification"], d["token"], d["mlm"]]
    port = free_port()
    url = f"http://127.0.0.1:{port}"  # loopback only, by construction
    log_path = os.path.join(tmp, "server.log")
    proc = start_server(models, port, args.threads, log_path)
    try:
        health = wait_up(httpx, url, proc)
        mix = request_mix(set(health["endpoints"]))
        results: list = []
        per_client = [[] for _ in range(args.clients)]
        deadline = time.monotonic() + args.max_seconds
        threads = [threading.Thread(target=client, args=(httpx, url, mix, args.requests, 1000 + i, deadline,
                                                         per_client[i])) for i in range(args.clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        for r in per_client:
            results.extend(r)
        summary = summarize(results, wall)
        after = httpx.get(url + "/health", timeout=10).json()
        summary["server_alive_after"] = proc.poll() is None and after["status"] == "ok"
        summary["model_calls"] = after["batching"]
        summary["clients"], summary["requests_per_client"] = args.clients, args.requests
        summary["models"] = [m["name"] + ":" + str(m["task"]) for m in health["models"]]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    with open(log_path, encoding="utf-8", errors="replace") as f:
        summary["server_tracebacks"] = f.read().count("Traceback")
    print(json.dumps(summary, indent=2, ensure_ascii=False))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=2, ensure_ascii=False)
    bad = summary["5xx"] or summary["dropped"] or summary["unexpected_status"] or not summary["server_alive_after"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
