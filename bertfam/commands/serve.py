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
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help="require `Authorization: Bearer KEY` on every request but the web page and /docs (401); "
                        "visible to other users in the process list: prefer --api-key-file or BERTFAM_API_KEY")
    p.add_argument("--api-key-file", default=None, metavar="FILE",
                   help="read the key from FILE (its first line); with --api-key too, both keys are accepted")
    p.add_argument("--insecure-no-auth", action="store_true",
                   help="serve a non-loopback --host without an API key (anyone who can reach it may call it)")
    p.add_argument("--allowed-hosts", default=None, metavar="NAMES",
                   help="comma-separated Host header names accepted (400 otherwise; '*': any). Default: "
                        "localhost, 127.0.0.1, ::1 and --host; any name when --host is a wildcard address "
                        "(0.0.0.0, ::), where the key protects the service")
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
    p.add_argument("--max-connections", type=positive_int, default=None,
                   help=f"open connections; one more is closed at once (default {d.max_connections}, at most "
                        "half the process's file-descriptor limit)")
    p.add_argument("--header-timeout", type=positive_float, default=d.header_timeout_s,
                   help="seconds for a request's headers to arrive; the connection is closed after")
    p.add_argument("--body-timeout", type=positive_float, default=d.body_timeout_s,
                   help="seconds for a request's body to arrive (408 after)")
    p.add_argument("--keep-alive", type=positive_float, default=d.keep_alive_s,
                   help="seconds an idle kept-alive connection stays open")
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

    try:  # fastapi and uvicorn
        from ..serving.app import create_app
        from ..serving.server import make_server
    except ImportError as e:
        raise ConfigError(f"serve needs the [serve] extra (pip install 'bertfam[serve]'): {e}") from None
    if args.threads:
        torch.set_num_threads(args.threads)
    limits = Limits(max_body_bytes=args.max_body_bytes, max_texts=args.max_texts,
                    max_passage_chars=args.max_passage_chars, timeout_s=args.timeout, max_batch=args.max_batch,
                    batch_wait_ms=args.batch_wait_ms, max_queue=args.max_queue,
                    max_request_tokens=args.max_request_tokens, max_batch_tokens=args.max_batch_tokens,
                    max_concurrent_requests=args.max_concurrent_requests,
                    max_connections=args.max_connections or _default_connections(Limits.max_connections),
                    header_timeout_s=args.header_timeout, body_timeout_s=args.body_timeout,
                    keep_alive_s=args.keep_alive)
    access = _access(args)
    _check_port(args.host, args.port)
    service = Service.from_dirs(args.model, limits, int8=args.int8, mrc_max_length=args.mrc_max_length,
                                mrc_doc_stride=args.mrc_doc_stride)
    app = create_app(service, access)
    logging.getLogger("bertfam").setLevel(logging.INFO)
    for m in service.models:
        print(f"bertfam serve: {m['name']} ({m['task'] or 'encoder'}{', int8' if m['int8'] else ''}) -> "
              f"{', '.join('/v1/' + e for e in m['endpoints']) or 'nothing (another model serves its task)'}")
    print(f"bertfam serve: page http://{args.host}:{args.port}/  API docs http://{args.host}:{args.port}/docs")
    try:
        make_server(app, args.host, args.port).run()
    except OSError as e:  # port taken, address not available
        raise ConfigError(f"serve: cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
    finally:
        service.shutdown()
    # reached on SIGTERM and SIGINT too (serving/server.py): requests in flight were answered first
    print("bertfam serve: stopped", flush=True)
    return 0


def _default_connections(default: int) -> int:
    """The connection cap: the default, but at most half the file-descriptor limit, so that model files,
    logs and accepting the next connection never fail for want of a descriptor."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(1, min(default, soft // 2)) if soft != resource.RLIM_INFINITY else default


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a name: whatever it resolves to, treat it as reachable from elsewhere
        return False


def _access(args):
    """The Access of the app (bertfam/serving/app.py) from the flags: the key(s), the Host names. Fails with
    one line before any model loads."""
    import os

    from ..errors import ConfigError
    from ..serving.app import LOOPBACK_HOSTS, Access

    keys = []
    if args.api_key is not None:
        if not args.api_key.strip():
            raise ConfigError("serve: --api-key is empty")
        keys.append(args.api_key.strip())
    if args.api_key_file is not None:
        try:
            with open(args.api_key_file, encoding="utf-8") as f:
                first = f.readline().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"serve: --api-key-file {args.api_key_file}: {getattr(e, 'strerror', None) or e}") from None
        if not first:
            raise ConfigError(f"serve: --api-key-file {args.api_key_file}: the first line is empty")
        keys.append(first)
    env = os.environ.get("BERTFAM_API_KEY", "").strip()
    if env and not keys:
        keys.append(env)
    loopback = _is_loopback(args.host)
    if not loopback and not keys and not args.insecure_no_auth:
        raise ConfigError(f"serve: --host {args.host} is reachable from other machines: give --api-key-file FILE "
                          "(or --api-key, BERTFAM_API_KEY), or --insecure-no-auth to serve it without a key")
    if args.allowed_hosts is not None:
        hosts = tuple(h.strip().lower().strip("[]") for h in args.allowed_hosts.split(",") if h.strip())
        if not hosts:
            raise ConfigError("serve: --allowed-hosts names no host")
    elif args.host in ("0.0.0.0", "::", ""):
        hosts = ("*",)  # clients use whatever name or address reaches this machine; the key guards it
    else:
        hosts = tuple(dict.fromkeys(LOOPBACK_HOSTS + (args.host.lower().strip("[]"),)))
    return Access(api_keys=tuple(keys), allowed_hosts=hosts)


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
