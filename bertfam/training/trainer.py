"""The shared trainer: AdamW + linear warm-up/decay, accumulation, clipping, autocast, atomic
checkpoints with exact resume, evaluation with best-model keeping and early stopping, DDP under
torchrun, tqdm progress and JSON-lines metrics."""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from ..checkpoint import read_weights
from ..errors import CheckpointError, ConfigError, TrainingStopped
from . import distributed as D
from .optim import linear_schedule, param_groups
from .sampling import BatchPlan

log = logging.getLogger("bertfam")
# Progress and evaluation lines: a child of "bertfam" that the CLI shows at INFO even without -v, so a run
# without a terminal (no tqdm bar) still reports on the console.
console = logging.getLogger("bertfam.progress")
STATE_FILE = "trainer_state.pt"


@dataclass
class TrainConfig:
    out_dir: str = "runs/default"
    epochs: float = 1
    max_steps: Optional[int] = None  # optimizer steps; overrides epochs when set
    batch_size: int = 32  # per process, per micro-step
    lr: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    warmup_steps: Optional[int] = None
    grad_accum: int = 1
    max_grad_norm: Optional[float] = 1.0
    precision: str = "auto"  # auto | fp32 | bf16 | fp16 (auto: bf16 on a GPU that has it, else fp32)
    seed: int = 42
    save_every: int = 0  # optimizer steps between checkpoints (0: only at the end)
    keep_last: int = 2  # checkpoints kept under out_dir/checkpoints, oldest removed first (0: all)
    save_optimizer_state: bool = True  # False: lean checkpoints (weights only), which cannot be resumed
    checkpoints: bool = True  # False: no out_dir/checkpoints at all, only the final model (and best/)
    log_every: int = 10
    eval_every: int = 0  # optimizer steps between evaluations (0: end of each epoch only)
    layerwise_lr_decay: Optional[float] = None
    head_lr: Optional[float] = None  # peak lr of the pooler and heads (None: lr, with the layer-wise decay)
    metric_for_best: Optional[str] = None
    greater_is_better: bool = True
    early_stopping_patience: Optional[int] = None  # evaluations without improvement
    group_by_length: bool = False
    shuffle: bool = True
    progress: bool = True
    save_final: bool = True

    def validate(self) -> None:
        if self.batch_size < 1 or self.grad_accum < 1:
            raise ConfigError("batch_size and grad_accum must be >= 1")
        if self.precision not in ("auto", "fp32", "bf16", "fp16"):
            raise ConfigError(f"precision {self.precision!r} not in auto/fp32/bf16/fp16")
        if self.max_steps is None and not self.epochs > 0:
            raise ConfigError("give epochs > 0 or max_steps")
        if self.keep_last < 0 or self.save_every < 0 or self.log_every < 1:
            raise ConfigError("keep_last and save_every must be >= 0, log_every >= 1")
        for name in ("save_optimizer_state", "checkpoints"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.save_every and not self.checkpoints:
            raise ConfigError("save_every asks for checkpoints, which checkpoints=False (--final-only) turns off")


def _rng_state() -> dict:
    s = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        s["cuda"] = torch.cuda.get_rng_state_all()
    return s


def _set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])
    if "cuda" in s and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)


class TrainerCallback:
    """Hooks into the training loop; override the ones you need (the defaults do nothing).

    Callbacks observe the run: they must not draw random numbers or change the trainer's state, or a
    resumed run would no longer match an uninterrupted one."""

    def on_step_end(self, trainer: "Trainer") -> None:
        """After each optimizer step and that step's logging, evaluation and checkpoint (every process)."""

    def on_checkpoint(self, trainer: "Trainer", path: str) -> None:
        """After checkpoint `path` is complete on disk (main process only)."""

    def on_train_begin(self, trainer: "Trainer") -> None:
        """Before the first step (after a resume), every process; not called when a resumed run is already
        complete, so a callback that writes run files leaves a finished run as it was."""


def count_tokens(batch: dict) -> int:
    am = batch.get("attention_mask")
    if am is not None and am.dim() == 2:
        return int(am.sum())
    ids = batch.get("input_ids")
    return int(ids.numel()) if ids is not None else 0


class Trainer:
    def __init__(self, model, cfg: TrainConfig, train_dataset: Sequence, collate_fn: Callable,
                 eval_fn: Optional[Callable] = None, lengths: Optional[Sequence[int]] = None,
                 step_metrics_fn: Optional[Callable] = None, tokenizer=None,
                 callbacks: Sequence[TrainerCallback] = ()):
        cfg.validate()
        if len(train_dataset) == 0:
            from ..errors import DataError

            raise DataError("training set is empty")
        self.model, self.cfg, self.data, self.collate = model, cfg, train_dataset, collate_fn
        self.eval_fn, self.step_metrics_fn = eval_fn, step_metrics_fn
        self.lengths = lengths
        self.callbacks = list(callbacks)
        self.tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        self.rank, self.world = D.init_if_needed()
        self.is_main = self.rank == 0
        self.device = torch.device(f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu")
        self.state = {"step": 0, "epoch": 0, "batch": 0, "best": None, "bad_evals": 0, "tokens": 0}
        self.history: list[dict] = []
        self._last_eval_step = -1

    # ------------------------------------------------------------------ set-up
    def _precision(self) -> Optional[torch.dtype]:
        p = self.cfg.precision
        if p == "auto":
            p = "bf16" if self.device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
        return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[p]

    def _setup(self):
        cfg = self.cfg
        seed_everything(cfg.seed)
        self.model.to(self.device)
        self.plan = BatchPlan(len(self.data), cfg.batch_size, cfg.seed, cfg.shuffle,
                              self.lengths if cfg.group_by_length else None, self.rank, self.world)
        per_epoch = max(1, math.ceil(len(self.plan) / cfg.grad_accum))
        self.total_steps = cfg.max_steps or max(1, int(round(cfg.epochs * per_epoch)))
        self.n_epochs = math.ceil(self.total_steps / per_epoch)
        warm = cfg.warmup_steps if cfg.warmup_steps is not None else int(cfg.warmup_ratio * self.total_steps)
        self.optim = torch.optim.AdamW(param_groups(self.model, cfg.lr, cfg.weight_decay, cfg.layerwise_lr_decay,
                                                   cfg.head_lr),
                                       lr=cfg.lr, betas=(0.9, 0.999), eps=1e-6 if cfg.lr > 1e-3 else 1e-8)
        self.sched = linear_schedule(self.optim, warm, self.total_steps)
        self.amp_dtype = self._precision()
        self.scaler = torch.amp.GradScaler(enabled=self.amp_dtype == torch.float16)
        self.wrapped = self.model
        if self.world > 1:
            self.wrapped = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                find_unused_parameters=True)

    # ------------------------------------------------------------------ checkpoints
    def _ckpt_root(self) -> str:
        return os.path.join(self.cfg.out_dir, "checkpoints")

    def save_checkpoint(self) -> Optional[str]:
        if not self.is_main:
            return None
        root = self._ckpt_root()
        final = os.path.join(root, f"step-{self.state['step']}")
        tmp = os.path.join(root, f".step-{self.state['step']}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            self.model.save_pretrained(tmp, tokenizer=self.tokenizer)
            torch.save(self._state_dict(), os.path.join(tmp, STATE_FILE))
        except Exception as e:  # noqa: BLE001 -- a full disk surfaces as OSError, or torch's RuntimeError
            shutil.rmtree(tmp, ignore_errors=True)  # a partial checkpoint would keep the disk full
            raise _save_error(e, tmp, root, self._checkpoint_bytes(root)) from None
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)  # the checkpoint appears complete or not at all
        kept = sorted(list_checkpoints(root), key=lambda p: int(p.rsplit("-", 1)[1]))
        for old in kept[:-self.cfg.keep_last] if self.cfg.keep_last > 0 else []:
            shutil.rmtree(old, ignore_errors=True)
        for cb in self.callbacks:
            cb.on_checkpoint(self, final)
        return final

    def _checkpoint_bytes(self, root: str) -> int:
        """Bytes one checkpoint takes: the last complete one's size, else the weights (x3 with the optimizer's
        two moments)."""
        done = _by_step(list_checkpoints(root))
        if done:
            last = done[-1]
            return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(last) for f in fs)
        weights = sum(p.numel() * p.element_size() for p in self.model.parameters())
        return weights * (3 if self.cfg.save_optimizer_state else 1)

    def _state_dict(self) -> dict:
        """What a checkpoint records; the optimizer moments alone are twice the weights' size."""
        st = {"trainer": dict(self.state), "train_config": asdict(self.cfg)}
        if self.cfg.save_optimizer_state:
            st.update(optimizer=self.optim.state_dict(), scheduler=self.sched.state_dict(),
                      scaler=self.scaler.state_dict(), rng=_rng_state())
        return st

    def _resume(self, path: str) -> None:
        ckpt = latest_checkpoint(path)
        sf = os.path.join(ckpt, STATE_FILE)
        try:
            st = torch.load(sf, map_location="cpu", weights_only=False)
        except Exception as e:
            raise CheckpointError(f"{sf}: cannot read trainer state ({str(e).splitlines()[0]})") from None
        if "optimizer" not in st:  # continuing with fresh moments and RNG would silently differ from the run
            raise CheckpointError(f"{ckpt}: saved without optimizer state (save_optimizer_state=False, "
                                  "--no-optimizer-state), so it cannot be resumed exactly; start a new run "
                                  "from its weights instead")
        sd, _ = read_weights(ckpt)
        try:
            self.model.load_state_dict(sd, strict=False)
        except RuntimeError as e:  # another model's checkpoint (another head, size): one line, not torch's dump
            detail = next((ln.strip() for ln in str(e).splitlines() if "size mismatch" in ln), str(e).splitlines()[0])
            raise CheckpointError(f"{ckpt}: does not fit this model, so it cannot be resumed ({detail}); give "
                                  "another --out") from None
        self.model.to(self.device)
        self.optim.load_state_dict(st["optimizer"])
        self.sched.load_state_dict(st["scheduler"])
        self.scaler.load_state_dict(st["scaler"])
        self.state.update(st["trainer"])
        _set_rng_state(st["rng"])
        log.info("resumed from %s at step %d (epoch %d, batch %d)", ckpt, self.state["step"], self.state["epoch"],
                 self.state["batch"])

    # ------------------------------------------------------------------ logging
    def _log(self, rec: dict) -> None:
        self.history.append(rec)
        if not self.is_main:
            return
        os.makedirs(self.cfg.out_dir, exist_ok=True)
        with open(os.path.join(self.cfg.out_dir, "metrics.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        tb = self._tensorboard()
        if tb is not None:
            for k, v in rec.items():
                if k not in ("step", "epoch") and isinstance(v, (int, float)):
                    tb.add_scalar(k, v, rec["step"])
            tb.flush()

    def _tensorboard(self):
        """A SummaryWriter under out_dir/tensorboard when the optional `tensorboard` package is installed."""
        if not hasattr(self, "_tb"):
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(os.path.join(self.cfg.out_dir, "tensorboard"))
            except ImportError:
                self._tb = None
        return self._tb

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> dict:
        if self.eval_fn is None:
            return {}
        was_training = self.model.training
        self.model.eval()
        with torch.no_grad():
            metrics = dict(self.eval_fn(self.model))
        self.model.train(was_training)
        self._last_eval_step = self.state["step"]
        rec = {"step": self.state["step"], "epoch": self.state["epoch"], **{f"eval_{k}": v for k, v in metrics.items()}}
        self._log(rec)
        if self.is_main:
            console.info("eval step %d: %s", rec["step"], _fmt_metrics(metrics))
        key = self.cfg.metric_for_best
        if key is not None:
            if key not in metrics:
                raise ConfigError(f"metric_for_best {key!r} not among eval metrics {sorted(metrics)}")
            v, best = metrics[key], self.state["best"]
            better = best is None or (v > best if self.cfg.greater_is_better else v < best)
            if better:
                self.state["best"], self.state["bad_evals"] = v, 0
                if self.is_main:
                    self.model.save_pretrained(os.path.join(self.cfg.out_dir, "best"), tokenizer=self.tokenizer)
            else:
                self.state["bad_evals"] += 1
        return metrics

    def _should_stop_early(self) -> bool:
        p = self.cfg.early_stopping_patience
        return p is not None and self.state["bad_evals"] >= p

    def _finished(self) -> bool:
        """The run has reached its end: the last step (or epoch), or an early stop."""
        return (self.state["step"] >= self.total_steps or self.state["epoch"] >= self.n_epochs
                or self._should_stop_early())

    # ------------------------------------------------------------------ loop
    def _autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def _to_device(self, batch: dict) -> dict:
        return {k: v.to(self.device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}

    def train(self, resume_from: Optional[str] = None) -> dict:
        """Train to the end. SIGTERM or SIGINT stops the run after the step in progress: a checkpoint is
        saved (when checkpoints are on) and `TrainingStopped` is raised (the CLI exits 0 on SIGTERM, 130 on
        SIGINT); `resume_from=` that checkpoint continues exactly."""
        if self.is_main:
            check_writable_dir(self.cfg.out_dir)  # before any work: a read-only --out fails in one line
        with _StopOnSignal() as stopper:
            return self._train(resume_from, stopper)

    def _train(self, resume_from: Optional[str], stopper: "_StopOnSignal") -> dict:
        self._setup()
        if resume_from:
            self._resume(resume_from)
            if self._finished():  # training on would add a step past the end and rotate a checkpoint out
                log.info("%s: already complete at step %d of %d; nothing to do", resume_from, self.state["step"],
                         self.total_steps)
                return {"steps": self.state["step"], "total_steps": self.total_steps, "epochs": self.state["epoch"],
                        "best": self.state["best"], "elapsed_s": 0.0, "tokens_per_s": 0.0, "history": [],
                        "already_complete": True}
        for cb in self.callbacks:
            cb.on_train_begin(self)
        cfg = self.cfg
        self.model.train()
        bar = self._progress_bar()
        window: dict[str, list] = {}
        t0, tok0, stop = time.perf_counter(), self.state["tokens"], False
        self._t_start, self._first_step = t0, self.state["step"]  # the rate and time left of _show
        while self.state["epoch"] < self.n_epochs and not stop:
            batches = self.plan.batches(self.state["epoch"])
            while self.state["batch"] < len(batches):
                micro = self._micro_batches(batches)
                loss, n_tok, extra = self._optimizer_step(micro)
                self.state["tokens"] += n_tok
                for k, v in {"loss": loss, **extra}.items():
                    window.setdefault(k, []).append(v)
                step = self.state["step"]
                if step % cfg.log_every == 0 or step == self.total_steps:
                    dt = time.perf_counter() - t0
                    tps = (self.state["tokens"] - tok0) * self.world / max(dt, 1e-9)
                    rec = {"step": step, "epoch": self.state["epoch"], "lr": self.sched.get_last_lr()[0],
                           "tokens_per_s": round(tps, 1), **{k: float(np.mean(v)) for k, v in window.items()}}
                    self._log(rec)
                    self._show(bar, rec)
                    window = {}
                if bar is not None:
                    bar.update(1)
                if cfg.eval_every and step % cfg.eval_every == 0:
                    self.evaluate()
                    stop = self._should_stop_early()
                if cfg.save_every and step % cfg.save_every == 0:  # validate: save_every implies checkpoints
                    self.save_checkpoint()
                for cb in self.callbacks:
                    cb.on_step_end(self)
                if stopper.signal is not None and step < self.total_steps:
                    self._stop_for(stopper.signal)
                if step >= self.total_steps or stop:
                    stop = True
                    break
            else:  # epoch finished
                self.state["epoch"] += 1
                self.state["batch"] = 0
                if not cfg.eval_every:
                    self.evaluate()
                    stop = stop or self._should_stop_early()
        if bar is not None:
            bar.close()
        if self.eval_fn is not None and self._last_eval_step != self.state["step"]:
            self.evaluate()  # the run ended between evaluations (max_steps / early end)
        if cfg.save_final:
            if cfg.checkpoints:
                self.save_checkpoint()
            if self.is_main:
                try:
                    self.model.save_pretrained(cfg.out_dir, tokenizer=self.tokenizer)  # each file atomic
                except Exception as e:  # noqa: BLE001 -- a full disk named as such, anything else as it was
                    raise _save_error(e, cfg.out_dir, self._ckpt_root(), self._checkpoint_bytes(self._ckpt_root()),
                                      "the final model") from None
        D.barrier()
        elapsed = time.perf_counter() - t0
        return {"steps": self.state["step"], "epochs": self.state["epoch"], "best": self.state["best"],
                "elapsed_s": elapsed, "tokens_per_s": (self.state["tokens"] - tok0) * self.world / max(elapsed, 1e-9),
                "history": self.history}

    def _stop_for(self, signum: int) -> None:
        """A stop signal arrived: keep the step just made (a checkpoint, unless this step saved one), then stop."""
        import signal as _signal

        name = _signal.Signals(signum).name
        saved = None
        if self.cfg.checkpoints:
            here = os.path.join(self._ckpt_root(), f"step-{self.state['step']}")
            saved = here if os.path.isdir(here) else self.save_checkpoint()
        D.barrier()
        if self.is_main:
            where = (f"checkpoint {saved}; --resume {self.cfg.out_dir} continues from it" if saved else
                     "no checkpoint (checkpoints are off)")
            console.warning("%s at step %d of %d: stopped, %s", name, self.state["step"], self.total_steps, where)
        raise TrainingStopped(signum, saved)

    def _progress_bar(self):
        """A tqdm bar on a terminal only: redirected to a file it would write a carriage-return mess."""
        if not (self.cfg.progress and self.is_main and sys.stderr.isatty()):
            return None
        from tqdm.auto import tqdm

        return tqdm(total=self.total_steps, initial=self.state["step"], desc="train", dynamic_ncols=True)

    def _show(self, bar, rec: dict) -> None:
        """The bar's postfix on a terminal, else one console line per log_every steps (main process)."""
        if bar is not None:
            bar.set_postfix(loss=f"{rec['loss']:.4f}", lr=f"{rec['lr']:.2e}", tok_s=f"{rec['tokens_per_s']:.0f}")
        elif self.is_main:  # no bar: the line carries the bar's rate and time left
            from ..progress import eta

            done = rec["step"] - self._first_step
            rate = done / max(time.perf_counter() - self._t_start, 1e-9)  # optimizer steps per second
            left = f", {eta((self.total_steps - rec['step']) / rate)} left" if rate > 0 and rec["step"] < \
                self.total_steps else ""
            console.info("step %d/%d: loss %.4f, lr %.2e, %.0f tokens/s, %.2f steps/s%s", rec["step"],
                         self.total_steps, rec["loss"], rec["lr"], rec["tokens_per_s"], rate, left)

    def _micro_batches(self, batches: list) -> list:
        """The next grad_accum batches of this epoch (fewer at the epoch's end); advances the data position."""
        b = self.state["batch"]
        micro = batches[b:b + self.cfg.grad_accum]
        self.state["batch"] = b + len(micro)
        return micro

    def _optimizer_step(self, micro: list) -> tuple[float, int, dict]:
        total_loss, n_tok, extras = 0.0, 0, {}
        for i, idx in enumerate(micro):
            batch = self._to_device(self.collate([self.data[j] for j in idx]))
            n_tok += count_tokens(batch)
            sync = i == len(micro) - 1 or self.world == 1
            ctx = contextlib.nullcontext() if sync else self.wrapped.no_sync()
            with ctx:
                with self._autocast():
                    out = self.wrapped(**batch)
                if out.loss is None:
                    raise ConfigError("the model returned no loss: the collate function must provide labels")
                self.scaler.scale(out.loss / len(micro)).backward()
            total_loss += float(out.loss.detach()) / len(micro)
            if self.step_metrics_fn is not None:
                with torch.no_grad():
                    for k, v in self.step_metrics_fn(out, batch).items():
                        extras[k] = extras.get(k, 0.0) + float(v) / len(micro)
        if self.cfg.max_grad_norm:
            self.scaler.unscale_(self.optim)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        self.scaler.step(self.optim)
        self.scaler.update()
        self.sched.step()
        self.optim.zero_grad(set_to_none=True)
        self.state["step"] += 1
        return total_loss, n_tok, extras


class _StopOnSignal:
    """While training: SIGTERM and SIGINT set `signal` instead of killing the run mid-step; the loop stops
    after the step in progress. A second SIGINT interrupts at once (the user insists). Only in the main
    thread (Python lets no other set handlers); elsewhere the signals keep their handlers."""

    def __init__(self):
        self.signal: Optional[int] = None
        self._before: dict = {}

    def __enter__(self) -> "_StopOnSignal":
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._before[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        import signal

        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signum

    def __exit__(self, *exc) -> None:
        import signal

        for sig, handler in self._before.items():
            signal.signal(sig, handler)


def check_writable_dir(path: str) -> None:
    """Raise ConfigError (one line) unless files can be created in `path` (made if missing): a read-only
    file system or a directory without write permission fails here, before any work, not at the first save."""
    import errno
    import tempfile

    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=path)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        why = {errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
               errno.EPERM: "permission denied", errno.ENOSPC: "no space left on the device"}.get(e.errno, e.strerror)
        raise ConfigError(f"{path}: cannot write the run there ({why or e}); choose another --out") from None


def _save_error(e: Exception, tmp: str, root: str, needed: int, what: str = "a checkpoint") -> Exception:
    """The error of a failed checkpoint save: a full disk named as such (torch reports it as
    `unexpected pos ...`), with the bytes needed; any other failure as it was."""
    import errno

    try:
        free = shutil.disk_usage(root if os.path.isdir(root) else tmp).free
    except OSError:
        free = None
    full = getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(e) or \
        (free is not None and free < needed)
    if not full:
        return e
    last = _by_step(list_checkpoints(root))
    kept = f"the last complete checkpoint {last[-1]} is untouched" if last else "no complete checkpoint yet"
    return CheckpointError(f"{tmp}: disk full while saving {what}: about {needed} bytes needed, "
                           f"{free if free is not None else 'unknown'} free; the partial files were removed, {kept}")


def _fmt_metrics(metrics: dict) -> str:
    return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items())


def _by_step(paths: list[str]) -> list[str]:
    return sorted(paths, key=lambda p: int(p.rsplit("-", 1)[1]))


def list_checkpoints(root: str) -> list[str]:
    if not os.path.isdir(root):
        return []
    return [os.path.join(root, d) for d in os.listdir(root)
            if d.startswith("step-") and d[5:].isdigit() and os.path.isfile(os.path.join(root, d, STATE_FILE))]


def latest_checkpoint(path: str) -> str:
    """`path` itself if it is a checkpoint, else the newest under path/checkpoints or path."""
    if os.path.isfile(os.path.join(path, STATE_FILE)):
        return path
    for root in (os.path.join(path, "checkpoints"), path):
        found = list_checkpoints(root)
        if found:
            return max(found, key=lambda p: int(p.rsplit("-", 1)[1]))
    raise CheckpointError(f"{path}: no checkpoint to resume from (expected checkpoints/step-N/{STATE_FILE})")
