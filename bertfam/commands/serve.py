"""`bertfam serve --model DIR [--model DIR2 ...]`: the HTTP API and the web page."""
from __future__ import annotations

from .common import check_window, non_negative_float, non_negative_int, positive_float, positive_int, tcp_port


def register(sub) -> None:
    from ..serving.service import Limits

    d = Limits()
    p = sub.add_parser("serve", help="serve models over HTTP (API, web page at /, OpenAPI at /docs)")
    p.add_argument("--model", action="append", required=True, metavar="DIR",
                   help="model directory; repeat for several (each head serves its endpoint: span -> /v1/mrc, "
                        "classification -> /v1/classify, token -> /v1/ner, mlm -> /v1/fill-mask)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=tcp_port, default=8000)
    p.add_argument("--max-body-bytes", type=positive_int, default=d.max_body_bytes,
                   help="largest request body (413 above)")
    p.add_argument("--max-texts", "--max-client-batch-size", type=positive_int, default=d.max_texts,
                   help="items or texts per request (413 above)")
    p.add_argument("--max-request-tokens", type=positive_int, default=d.max_request_tokens,
                   help="tokens per request after tokenization, every MRC/NER window counted (413 above)")
    p.add_argument("--max-batch-tokens", type=positive_int, default=d.max_batch_tokens,
                   help="tokens per model call; an abandoned request stops between calls")
    p.add_argument("--max-concurrent-requests", type=positive_int, default=d.max_concurrent_requests,
                   help="/v1 requests in progress at once (429 + Retry-After above)")
    p.add_argument("--max-passage-chars", type=positive_int, default=d.max_passage_chars,
                   help="longest text field in characters (422 above); passages longer than the model window "
                        "are still answered, through overlapping windows")
    p.add_argument("--timeout", type=positive_float, default=d.timeout_s,
                   help="seconds per request, queueing included (503)")
    p.add_argument("--max-batch", type=positive_int, default=d.max_batch,
                   help="items per model call (dynamic batching)")
    p.add_argument("--batch-wait-ms", type=non_negative_float, default=d.batch_wait_ms,
                   help="how long a request waits for others to share its batch")
    p.add_argument("--max-queue", type=positive_int, default=d.max_queue, help="waiting items per endpoint (429 above)")
    p.add_argument("--mrc-max-length", type=positive_int, default=None,
                   help="MRC window in tokens (default: the model's)")
    p.add_argument("--mrc-doc-stride", type=non_negative_int, default=None,
                   help="MRC window overlap (default: the model's)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--int8", action="store_true",
                   help="run the models in int8 (quantized weights and activations; an int8 checkpoint needs no flag)")
    p.set_defaults(func=_serve)


def _serve(args) -> int:
    check_window(args, "mrc_max_length", "mrc_doc_stride")
    import logging

    import torch

    from ..errors import ConfigError
    from ..serving.service import Limits, Service

    try:
        import uvicorn

        from ..serving.app import create_app
    except ImportError as e:
        raise ConfigError(f"serve needs the [serve] extra (pip install 'bertfam[serve]'): {e}") from None
    if args.threads:
        torch.set_num_threads(args.threads)
    limits = Limits(max_body_bytes=args.max_body_bytes, max_texts=args.max_texts,
                    max_passage_chars=args.max_passage_chars, timeout_s=args.timeout, max_batch=args.max_batch,
                    batch_wait_ms=args.batch_wait_ms, max_queue=args.max_queue,
                    max_request_tokens=args.max_request_tokens, max_batch_tokens=args.max_batch_tokens,
                    max_concurrent_requests=args.max_concurrent_requests)
    _check_port(args.host, args.port)
    service = Service.from_dirs(args.model, limits, int8=args.int8, mrc_max_length=args.mrc_max_length,
                                mrc_doc_stride=args.mrc_doc_stride)
    app = create_app(service)
    logging.getLogger("bertfam").setLevel(logging.INFO)
    for m in service.models:
        print(f"bertfam serve: {m['name']} ({m['task'] or 'encoder'}{', int8' if m['int8'] else ''}) -> "
              f"{', '.join('/v1/' + e for e in m['endpoints']) or 'nothing (another model serves its task)'}")
    print(f"bertfam serve: page http://{args.host}:{args.port}/  API docs http://{args.host}:{args.port}/docs")
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_keep_alive=15)
    except OSError as e:  # port taken, address not available
        raise ConfigError(f"serve: cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    finally:
        service.shutdown()
    return 0


def _check_port(host: str, port: int) -> None:
    """Fail with one line before loading models when the address cannot be bound (uvicorn would exit 1)."""
    import socket

    from ..errors import ConfigError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ConfigError(f"serve: --host {host}: {e.strerror or e}") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            raise ConfigError(f"serve: cannot listen on {host}:{port}: {e.strerror or e}") from None
