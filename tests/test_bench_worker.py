"""benchmarks/bench/worker.py: the one subprocess protocol of the benchmarks (a worker's result is its last
RESULT line; a failed worker is one WorkerError that says what failed and ends with its stderr)."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from bench import worker  # noqa: E402


def _py(code: str) -> list:
    return [sys.executable, "-c", "import sys; sys.path.insert(0, %r)\n%s" % (os.path.join(ROOT, "benchmarks"), code)]


def test_the_last_result_line_is_the_result():
    code = "from bench.worker import emit\nprint('RESULT not this one')\nprint('noise')\nemit({'a': [1, 2]})\nprint('more')"
    assert worker.run(_py(code)) == {"a": [1, 2]}
    assert worker.wait(worker.start(_py(code))) == {"a": [1, 2]}


def test_a_failed_worker_says_what_and_why():
    with pytest.raises(worker.WorkerError) as e:
        worker.run(_py("import sys; print('working', file=sys.stderr); sys.exit('it broke')"), what="worker time")
    assert str(e.value).startswith("worker time failed:") and worker.last_line(e.value) == "it broke"
    with pytest.raises(worker.WorkerError, match="no result failed"):  # exit 0 without a RESULT line
        worker.run(_py("print('done')"), what="no result")
    with pytest.raises(worker.WorkerError, match=r"side failed \(exit 3\)"):
        worker.wait(worker.start(_py("import sys; sys.exit(3)")), what="side")


def test_worker_environment_sets_every_thread_knob():
    env = worker.env(3)
    assert [env[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "BENCH_THREADS")] == ["3", "3", "3"]
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env["BENCH_SPIN"] == "0"
    spinning = worker.env(2, spin=True)
    assert "OMP_WAIT_POLICY" not in spinning or spinning["OMP_WAIT_POLICY"] == os.environ.get("OMP_WAIT_POLICY")
    assert spinning["BENCH_SPIN"] == "1"
