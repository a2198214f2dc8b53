"""Training writes under faults: a read-only or unwritable --out fails before any work; a full disk
during a checkpoint save is one line naming the path and the bytes needed, with the partial files removed
and the last complete checkpoint untouched; SIGTERM/SIGINT stop after the step in progress with a
checkpoint that resumes exactly.

The read-only and full disks are real tmpfs mounts where this process may mount (root); the same faults are
also simulated (a refused write, a save that fails half-way as torch reports a full disk) so that they are
tested everywhere."""
import contextlib
import errno
import os
import signal
import subprocess

import pytest
import torch

import bertfam
from bertfam.errors import TrainingStopped
from bertfam.training import TrainConfig, Trainer, TrainerCallback
from bertfam.training.trainer import latest_checkpoint

from .test_pretrain_train import _args, tiny  # noqa: F401 -- the module fixture `tiny` (vocabulary + config)
from .test_trainer import _collate, _data, _model


@contextlib.contextmanager
def tmpfs(path, size: int, readonly: bool = False):
    """A tmpfs of `size` bytes at `path`; skips the test where mounting is not permitted."""
    os.makedirs(path, exist_ok=True)
    opts = f"size={size}" + (",ro" if readonly else "")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}); the simulated test covers it")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


class _Began(TrainerCallback):
    began = False

    def on_train_begin(self, trainer):
        self.began = True


def _trainer(tiny_cfg, out, callbacks=(), **kw):
    tc = TrainConfig(out_dir=str(out), batch_size=8, progress=False, **{"max_steps": 6, **kw})
    return Trainer(_model(tiny_cfg), tc, _data(), _collate, callbacks=list(callbacks))


# ------------------------------------------------------------------ read-only --out
def test_read_only_out_fails_before_any_work(tmp_path, tiny_cfg):
    began = _Began()
    with tmpfs(tmp_path / "ro", 1 << 20, readonly=True) as ro:
        with pytest.raises(bertfam.ConfigError, match="read-only file system") as e:
            _trainer(tiny_cfg, ro / "run", [began]).train()
    assert str(ro / "run") in str(e.value) and "\n" not in str(e.value)
    assert not began.began


def test_unwritable_out_simulated_fails_before_any_work(tmp_path, tiny_cfg, monkeypatch):
    import tempfile

    def refused(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(tempfile, "mkstemp", refused)
    began = _Began()
    with pytest.raises(bertfam.ConfigError, match=r"cannot write the run there \(permission denied\); choose another --out"):
        _trainer(tiny_cfg, tmp_path / "run", [began]).train()
    assert not began.began


def test_cli_read_only_out_is_one_line_exit_2(tiny, tmp_path, capsys):  # noqa: F811
    from .conftest import cli

    with tmpfs(tmp_path / "ro", 1 << 20, readonly=True) as ro:
        rc, _, err = cli(capsys, *_args(tiny, ro / "run", "--max-steps", "2"))
    assert rc == 2 and err.count("\n") == 1 and "read-only" in err and "Traceback" not in err, err


# ------------------------------------------------------------------ full disk
def _step_of(path):
    return int(os.path.basename(path).rsplit("-", 1)[1])


def _assert_full_disk_handled(e, root, out):
    msg = str(e.value)
    assert "\n" not in msg and "disk full" in msg and "bytes needed" in msg and ".step-4.tmp" in msg, msg
    assert "step-2 is untouched" in msg, msg
    assert sorted(os.listdir(root)) == ["step-2"]  # no .step-4.tmp left to keep the disk full
    assert _step_of(latest_checkpoint(str(out))) == 2


def test_full_disk_during_a_save_real_tmpfs(tmp_path, tiny_cfg):
    probe = _trainer(tiny_cfg, tmp_path / "probe", max_steps=2, save_every=2)
    probe.train()
    ckpt = latest_checkpoint(str(tmp_path / "probe"))
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(ckpt) for f in fs)
    # room for one checkpoint and a half: the second save runs out of space part-way
    with tmpfs(tmp_path / "small", int(size * 1.5) + 64 * 1024) as small:
        out = small / "run"
        with pytest.raises(bertfam.CheckpointError) as e:
            _trainer(tiny_cfg, out, save_every=2, save_final=False).train()
        _assert_full_disk_handled(e, out / "checkpoints", out)
        # the kept checkpoint is complete: training resumes from it (on a disk with room)
        resumed = _trainer(tiny_cfg, tmp_path / "resumed", max_steps=6).train(resume_from=str(out))
        assert resumed["steps"] == 6


def test_full_disk_simulated_as_torch_reports_it(tmp_path, tiny_cfg, monkeypatch):
    """torch.save on a full disk: a partial file, then `unexpected pos ...` (a RuntimeError, no errno)."""
    from bertfam.training import trainer as T

    real_save, real_usage = torch.save, T.shutil.disk_usage
    state = {"full": False}

    def save(obj, path, *a, **k):
        if "step-4" in str(path):
            with open(path, "wb") as f:
                f.write(b"\0" * 28052)  # what fitted
            state["full"] = True
            raise RuntimeError("[enforce fail at inline_container.cc:859] . PytorchStreamWriter failed writing "
                               "file data/0: file write failed; unexpected pos 28160 vs 28052")
        return real_save(obj, path, *a, **k)

    def usage(path):
        u = real_usage(path)
        return u._replace(free=0) if state["full"] else u
    monkeypatch.setattr(T.torch, "save", save)
    monkeypatch.setattr(T.shutil, "disk_usage", usage)
    out = tmp_path / "run"
    with pytest.raises(bertfam.CheckpointError) as e:
        _trainer(tiny_cfg, out, save_every=2).train()
    _assert_full_disk_handled(e, out / "checkpoints", out)


# ------------------------------------------------------------------ stop signals
class _SignalAt(TrainerCallback):
    def __init__(self, step, sig):
        self.step, self.sig = step, sig

    def on_step_end(self, trainer):
        if trainer.state["step"] == self.step:
            os.kill(os.getpid(), self.sig)  # as `kill` or Ctrl-C would, while the step's work is done


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_saves_a_checkpoint_that_resumes_exactly(tmp_path, tiny_cfg, sig):
    torch.manual_seed(0)
    full = _trainer(tiny_cfg, tmp_path / "full", max_steps=6)
    full.train()
    torch.manual_seed(0)
    before = signal.getsignal(sig)
    with pytest.raises(TrainingStopped) as e:
        _trainer(tiny_cfg, tmp_path / "part", [_SignalAt(3, sig)], max_steps=6).train()
    assert signal.getsignal(sig) is before  # the trainer's handler is gone again
    assert e.value.signum == sig and _step_of(e.value.path) == 3
    assert not os.path.exists(tmp_path / "part" / "model.safetensors")  # stopped: no final model
    resumed = _trainer(tiny_cfg, tmp_path / "resumed", max_steps=6)
    resumed.train(resume_from=e.value.path)
    for (k, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), k


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_cli_exit_status_of_a_stopped_run(monkeypatch, capsys, sig, code):
    from bertfam import cli

    def stopped(args):
        raise TrainingStopped(sig, "runs/x/checkpoints/step-3")
    parser = cli.build_parser()
    args = parser.parse_args(["pretrain", "--model-config", "m.json", "--vocab", "v.txt", "--corpus", "c.txt",
                              "--out", "o"])
    args.func = stopped
    monkeypatch.setattr(cli, "build_parser", lambda: type("P", (), {"parse_args": lambda self, argv: args})())
    assert cli.main([]) == code
    assert "Traceback" not in capsys.readouterr().err


def test_full_disk_at_the_final_save_is_one_line(tmp_path, tiny_cfg, monkeypatch):
    out = tmp_path / "run"
    tr = _trainer(tiny_cfg, out, max_steps=2, save_every=1)
    real = tr.model.save_pretrained

    def save(path, *a, **k):
        if os.path.normpath(str(path)) == os.path.normpath(str(out)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, *a, **k)
    monkeypatch.setattr(tr.model, "save_pretrained", save)
    with pytest.raises(bertfam.CheckpointError) as e:
        tr.train()
    msg = str(e.value)
    assert "disk full while saving the final model" in msg and "bytes needed" in msg and "step-2 is untouched" in msg
