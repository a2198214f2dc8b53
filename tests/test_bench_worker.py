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


def test_wait_policy_names_what_measured_the_machine():
    assert worker.wait_policy("auto", 0.04, "cores busy over 2 s") == \
        (True, "auto: quiet machine (cores busy over 2 s 0.04 < 0.5)")


def test_proc_stat_reading_counts_busy_ticks_and_cpus(tmp_path):
    """The "cpu" line's user+nice+system+irq+softirq+steal are busy, idle+iowait are not; guest columns
    (already inside user) are not counted twice; the CPU count is the number of "cpuN" lines."""
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 20 800 30 1 2 7 50 0\ncpu0 50 2 10 400 15 0 1 3 25 0\n"
                    "cpu1 50 3 10 400 15 1 1 4 25 0\nintr 123\nctxt 456\n")
    assert worker.read_proc_stat(str(stat)) == (135, 965, 2)
    assert worker.read_proc_stat(str(tmp_path / "missing")) is None
    stat.write_text("intr 123\n")
    assert worker.read_proc_stat(str(stat)) is None


def test_busy_cores_is_the_other_processes_share_over_the_sample():
    """Two samples: 150 of 200 ticks busy on 2 CPUs = 1.5 cores; the sampler sleeps meanwhile (its own
    share is nothing), and an unreadable or unchanged /proc/stat gives None (the caller falls back)."""
    samples = iter([(1000, 5000, 2), (1150, 5200, 2)])
    slept = []
    assert worker.busy_cores(2.0, read=lambda: next(samples), sleep=slept.append) == 1.5
    assert slept == [2.0]
    assert worker.busy_cores(1.0, read=lambda: None, sleep=lambda s: None) is None
    same = iter([(10, 50, 2), (10, 50, 2)])
    assert worker.busy_cores(1.0, read=lambda: next(same), sleep=lambda s: None) is None


def test_machine_busy_samples_this_machine_or_falls_back_to_the_load_average(monkeypatch):
    monkeypatch.setattr(worker, "SAMPLE_S", 0.05)
    busy, measure = worker.machine_busy()
    assert 0.0 <= busy <= (os.cpu_count() or 1) + 0.5 and measure == "cores busy over 0.05 s"
    monkeypatch.setattr(worker, "busy_cores", lambda: None)
    monkeypatch.setattr(worker.os, "getloadavg", lambda: (0.7, 0.5, 0.4))
    assert worker.machine_busy() == (0.7, "load average")


def test_report_calls_a_machine_shared_only_when_others_loaded_it():
    """The run's own threads count in the load average (spinning ones all the time): 2 threads ending at
    load 2.0 on a machine quiet at start is a quiet run; a start above 1 or an end above threads + 1 is not."""
    from bench import report

    la = lambda start, end: {"start": [start, 0, 0], "end": [end, 0, 0]}  # noqa: E731
    assert not report.shared(la(0.2, 2.0), threads=2)
    assert not report.shared(la(0.8, 1.3), threads=2)
    assert report.shared(la(1.6, 1.9), threads=2)
    assert report.shared(la(0.3, 3.4), threads=2)
    # /proc/stat samples decide where the run took them: a load average left by the job before is not others'
    # work during the run (2026-12-06: load 1.9 at start, 0.02 cores busy)
    assert not report.shared(la(1.9, 1.3), threads=2, busy={"start": 0.02, "end": 0.01, "sampled": True})
    assert not report.shared(la(1.9, 1.3), threads=2, busy={"start": 0.02, "sampled": True})  # end: not sampled
    assert report.shared(la(0.1, 0.2), threads=2, busy={"start": 0.02, "end": 0.9, "sampled": True})
    assert report.shared(la(1.9, 1.3), threads=2, busy={"start": 1.9, "sampled": False})  # fell back: load average
    assert report.busy_text({"start": 0.02, "end": 0.5, "sampled": True}) == (
        "Other processes' work (2 s samples of /proc/stat): 0.02 cores at start, 0.50 at end. ")
    assert report.busy_text({"start": 1.9, "sampled": False}) == ""
