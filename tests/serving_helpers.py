"""Tiny random checkpoints for the serving tests and benchmarks: one per head the service serves."""
from __future__ import annotations

import os
import socket
import threading
import time

from .conftest import ZH_VOCAB

NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
CLS_LABELS = ["负面", "正面"]


def make_tiny_models(root: str, seed: int = 0) -> dict[str, str]:
    """{"span", "classification", "token", "mlm"} -> model directory under root (random weights)."""
    import bertfam
    from bertfam import HeadConfig, preset

    tok = bertfam.Tokenizer.from_vocab(ZH_VOCAB)
    heads = {"span": HeadConfig(task="span"),
             "classification": HeadConfig(task="classification", num_labels=2, labels=list(CLS_LABELS)),
             "token": HeadConfig(task="token", num_labels=len(NER_LABELS), labels=list(NER_LABELS)),
             "mlm": HeadConfig(task="mlm")}
    out = {}
    for i, (name, head) in enumerate(heads.items()):
        cfg = preset("bert-tiny", vocab_size=tok.vocab_size, hidden_size=32, num_attention_heads=2,
                     intermediate_size=64, num_hidden_layers=1, max_position_embeddings=128, head=head)
        model = bertfam.build_model(cfg, seed=seed + i)
        d = os.path.join(root, name)
        model.save_pretrained(d, tokenizer=tok)
        out[name] = d
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """A real uvicorn server for `app` on a free 127.0.0.1 port, in a background thread."""

    def __init__(self, app):
        from bertfam.serving.server import make_server

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # the server `bertfam serve` runs, with the limits of the app's service (connections, timeouts)
        self.server = make_server(app, "127.0.0.1", self.port)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
