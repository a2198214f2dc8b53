"""The one protocol by which a benchmark runs a measurement in a subprocess of its own: a fresh process per
measurement gives each engine its own peak memory and thread pools, and a native crash in one engine
cannot take the run down.

The parent starts the script again with its worker options (`run`, or `start` + `wait` for workers that run
side by side); the worker does its job and prints its result as the last line that starts with "RESULT "
(`emit`), a JSON object; whatever else it prints is ignored. A worker that exits non-zero or prints no
result raises `WorkerError`, whose message ends with the tail of the worker's stderr.

`env(threads, spin)` is the environment every engine of a timing runs under: the thread count for torch,
OpenMP, MKL, onnxruntime and OpenVINO (the latter two read BENCH_THREADS through `threads()`), and idle
threads that sleep instead of spinning unless `spin` (BENCH_SPIN, `spin()`)."""
from __future__ import annotations

import json
import os
import subprocess

PREFIX = "RESULT "


class WorkerError(RuntimeError):
    """A worker failed: it exited non-zero or printed no RESULT line."""


def emit(result) -> None:
    """Print a worker's result for its parent (the last RESULT line counts)."""
    print(PREFIX + json.dumps(result), flush=True)


def env(threads: int, spin: bool = False) -> dict:
    """This process's environment with the benchmark's thread settings for a worker."""
    out = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), BENCH_THREADS=str(threads),
               TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore", BENCH_SPIN=str(int(spin)))
    if spin:  # the libraries' own defaults, whatever the calling shell set
        out.pop("OMP_WAIT_POLICY", None)
    else:  # idle OpenMP threads sleep instead of spinning (both torch engines alike)
        out["OMP_WAIT_POLICY"] = "PASSIVE"
    return out


QUIET_LOAD = 0.5  # 1-minute load average under which --wait-policy auto lets idle threads spin


def wait_policy(requested: str, load: float) -> tuple[bool, str]:
    """(spin, why) for --wait-policy `requested` on a machine whose 1-minute load average is `load`."""
    if requested != "auto":
        return requested == "spin", f"--wait-policy {requested}"
    if load < QUIET_LOAD:
        return True, f"auto: quiet machine (load average {load:.2f} < {QUIET_LOAD})"
    return False, f"auto: busy machine (load average {load:.2f} >= {QUIET_LOAD})"


def threads() -> int:
    """The worker's thread count: BENCH_THREADS from its parent, else torch's."""
    import torch

    return int(os.environ.get("BENCH_THREADS") or torch.get_num_threads())


def spin() -> bool:
    """Whether the parent let idle threads busy-wait (BENCH_SPIN)."""
    return os.environ.get("BENCH_SPIN", "0") != "0"


def set_threads(n: int) -> None:
    """torch's intra-op threads to n, inter-op to 1 (as every engine of a benchmark runs)."""
    import torch

    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set, or parallel work started (a worker called in-process: int8_accuracy.py)
        pass


def run(cmd: list, env: dict | None = None, what: str = "worker") -> dict:
    """Run the worker command `cmd` to its end; its result. WorkerError names `what` and the stderr tail."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return _result(what, p.returncode, p.stdout, p.stderr)


def start(cmd: list, env: dict | None = None) -> subprocess.Popen:
    """Start a worker that runs beside others (`wait` for its result); its stderr goes to ours as it comes,
    so that a chatty worker never blocks on a full pipe while another is being waited for."""
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)


def wait(proc: subprocess.Popen, what: str = "worker") -> dict:
    """The result of a worker from `start`, once it has ended."""
    out, _ = proc.communicate()
    return _result(what, proc.returncode, out, None)


def last_line(err: Exception) -> str:
    """The last non-blank line of an error's message (a worker's: the last line of its stderr), for a table."""
    lines = [ln for ln in str(err).splitlines() if ln.strip()]
    return lines[-1][:300] if lines else type(err).__name__


def _result(what: str, returncode: int, stdout: str, stderr: str | None) -> dict:
    lines = [ln for ln in stdout.splitlines() if ln.startswith(PREFIX)]
    if returncode != 0 or not lines:
        raise WorkerError(f"{what} failed:\n{stderr[-3000:]}" if stderr is not None
                          else f"{what} failed (exit {returncode})")
    return json.loads(lines[-1][len(PREFIX):])
