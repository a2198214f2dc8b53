import os
import sys

# OpenMP threads that sleep instead of spinning: on a busy 2-core machine spinning threads starve each
# other (measured ~4x slower suites here); on a quiet one the cost is negligible. Must precede torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The fp32 kernel probe's cache (modeling/linear_probe.py) in a fresh directory: tests neither read a choice
# probed outside them nor leave one behind.
import tempfile  # noqa: E402

os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="bertfam-tests-cache-")

import pytest  # noqa: E402
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
ZH_VOCAB = os.path.join(FIXTURES, "vocab", "bert-base-chinese-vocab.txt")

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture
def zh_vocab():
    return ZH_VOCAB


@pytest.fixture
def tiny_cfg():
    from bertfam import preset

    return preset("bert-tiny", vocab_size=120, num_hidden_layers=2, max_position_embeddings=64)


def minilm_dir():
    from bertfam.runners.demo import minilm_dir as f

    return f()


def cli(capsys, *args):
    """`bertfam ARGS` in this process (no interpreter start-up): (exit code, stdout, stderr) of this call only."""
    from bertfam.cli import main

    capsys.readouterr()
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def run_cli(*args, cwd=None):
    """Run `python -m bertfam ARGS` in a subprocess; returns CompletedProcess."""
    import subprocess

    return subprocess.run([sys.executable, "-m", "bertfam", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=600)
