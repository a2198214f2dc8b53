"""`bertfam serve` as a user runs it: a real process on a free loopback port."""
import signal
import subprocess
import sys
import time

from .conftest import ROOT
from .serving_helpers import free_port, make_tiny_models


def test_serve_answers_over_http_then_stops_cleanly(tmp_path):
    import httpx

    dirs = make_tiny_models(str(tmp_path))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bertfam", "serve", "--model", dirs["span"], "--model",
                             dirs["classification"], "--port", str(port), "--max-texts", "4", "--threads", "1"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                health = httpx.get(url + "/health", timeout=2).json()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "server did not come up"
                time.sleep(0.2)
        assert health["endpoints"]["mrc"] == "span" and health["limits"]["max_texts"] == 4
        r = httpx.post(url + "/v1/mrc", json={"question": "首都是哪里？", "passage": "北京是首都。"})
        assert r.status_code == 200 and set(r.json()) == {"answer", "start", "end", "score", "answerable"}
        r = httpx.post(url + "/v1/classify", json=[{"text": "好"}] * 5)
        assert r.status_code == 413 and r.json()["field"] == "body"
        assert "<html" in httpx.get(url + "/").text
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "/v1/mrc" in out and "Traceback" not in out


def test_serve_bad_model_dir_or_busy_port_is_one_line_exit_2(tmp_path, capsys):
    import socket

    from bertfam.cli import main  # in-process: the same code path as the command, without a new interpreter

    assert main(["serve", "--model", str(tmp_path / "missing"), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing" in err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert main(["serve", "--model", str(tmp_path / "missing"), "--port", str(s.getsockname()[1])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot listen" in err


def test_sigterm_answers_requests_in_flight_then_exits_0(tmp_path):
    import threading

    import httpx

    dirs = make_tiny_models(str(tmp_path))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bertfam", "serve", "--model", dirs["span"], "--port", str(port),
                             "--threads", "1"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                httpx.get(url + "/health", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "server did not come up"
                time.sleep(0.2)
        # ~7200 characters: ~120 windows of the tiny model (about 1 s of work on a quiet 2-core machine, more
        # under load), inside the default request token budget
        heavy = {"question": "这段话说了什么？", "passage": "北京是中华人民共和国的首都，也是全国的政治中心。" * 300}
        got = {}
        t = threading.Thread(target=lambda: got.update(r=httpx.post(url + "/v1/mrc", json=heavy, timeout=60)))
        t.start()
        time.sleep(0.3)
        assert t.is_alive()  # the request is in flight when the signal comes
        proc.send_signal(signal.SIGTERM)
        t.join(60)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert got["r"].status_code == 200, got["r"].text
    assert proc.returncode == 0, out  # not 143: uvicorn does not re-raise the signal
    assert "bertfam serve: stopped" in out and "Traceback" not in out
