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
import time

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


QUIET_LOAD = 0.5  # cores' worth of other work under which --wait-policy auto lets idle threads spin
SAMPLE_S = 2.0  # how long auto watches the machine before choosing


def read_proc_stat(path: str = "/proc/stat") -> tuple[int, int, int] | None:
    """(busy, total) clock ticks of all CPUs together since boot and the CPU count, from /proc/stat's "cpu"
    lines; None where there is no such file (not Linux). busy counts user, nice, system, irq, softirq and
    steal (time a hypervisor gave to others is time these threads would not get either)."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    ncpu = sum(1 for ln in lines if ln.startswith("cpu") and ln[3:4].isdigit())
    head = next((ln.split() for ln in lines if ln.startswith("cpu ")), None)
    if head is None or ncpu == 0 or len(head) < 9:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in head[1:9])
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait, ncpu


def busy_cores(seconds: float = SAMPLE_S, read=read_proc_stat, sleep=time.sleep) -> float | None:
    """How many cores' worth of work the machine did over the next `seconds` (this process sleeps meanwhile,
    so it is other processes' work): what the machine is doing now, where the 1-minute load average still
    remembers a job that ended a minute ago. None where /proc/stat cannot be read."""
    first = read()
    sleep(seconds)
    second = read()
    if first is None or second is None or second[1] <= first[1]:
        return None
    return (second[0] - first[0]) / (second[1] - first[1]) * second[2]


def wait_policy(requested: str, busy: float, measure: str = "load average") -> tuple[bool, str]:
    """(spin, why) for --wait-policy `requested` on a machine that `measure` says is `busy` cores busy."""
    if requested != "auto":
        return requested == "spin", f"--wait-policy {requested}"
    if busy < QUIET_LOAD:
        return True, f"auto: quiet machine ({measure} {busy:.2f} < {QUIET_LOAD})"
    return False, f"auto: busy machine ({measure} {busy:.2f} >= {QUIET_LOAD})"


def machine_busy() -> tuple[float, str]:
    """(busy cores, what measured it): a /proc/stat sample of SAMPLE_S, else the 1-minute load average."""
    busy = busy_cores()
    if busy is not None:
        return busy, f"cores busy over {SAMPLE_S:g} s"
    return os.getloadavg()[0], "load average"


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
