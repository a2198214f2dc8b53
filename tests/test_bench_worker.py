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
    assert "OMP_WAIT_POLICY" not in spinning  # the libraries' defaults, even under the test suite's PASSIVE
    assert spinning["BENCH_SPIN"] == "1"


def test_wait_policy_spins_only_on_a_quiet_machine_unless_told():
    """auto: the libraries' spinning defaults on a quiet machine (OpenVINO's pool spins whatever we set, so
    sleeping there would handicap the torch and onnxruntime engines only), sleeping threads on a busy one."""
    assert worker.wait_policy("auto", 0.1)[0] is True
    assert worker.wait_policy("auto", worker.QUIET_LOAD)[0] is False
    assert worker.wait_policy("auto", 1.7) == (False, "auto: busy machine (load average 1.70 >= 0.5)")
    assert worker.wait_policy("spin", 5.0) == (True, "--wait-policy spin")
    assert worker.wait_policy("sleep", 0.0) == (False, "--wait-policy sleep")


def test_report_calls_a_machine_shared_only_when_others_loaded_it():
    """The run's own threads count in the load average (spinning ones all the time): 2 threads ending at
    load 2.0 on a machine quiet at start is a quiet run; a start above 1 or an end above threads + 1 is not."""
    from bench import report

    la = lambda start, end: {"start": [start, 0, 0], "end": [end, 0, 0]}  # noqa: E731
    assert not report.shared(la(0.2, 2.0), threads=2)
    assert not report.shared(la(0.8, 1.3), threads=2)
    assert report.shared(la(1.6, 1.9), threads=2)
    assert report.shared(la(0.3, 3.4), threads=2)
