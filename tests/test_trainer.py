"""The shared trainer: learning, exact resume, accumulation, length grouping, best-model keeping."""
import json
import logging
import os

import pytest
import torch

import bertfam
from bertfam import HeadConfig
from bertfam.training import BatchPlan, TrainConfig, Trainer, TrainerCallback, param_groups
from bertfam.training.trainer import latest_checkpoint


def _data(n=48, T=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        L = int(torch.randint(4, T + 1, (1,), generator=g))
        label = i % 2
        # learnable signal: label-dependent token at position 1
        ids = torch.randint(10, 100, (L,), generator=g)
        ids[1] = 5 + label
        out.append({"ids": ids, "label": label})
    return out


def _collate(items):
    T = max(len(x["ids"]) for x in items)
    ids = torch.zeros(len(items), T, dtype=torch.long)
    am = torch.zeros(len(items), T, dtype=torch.long)
    for i, x in enumerate(items):
        ids[i, :len(x["ids"])] = x["ids"]
        am[i, :len(x["ids"])] = 1
    return {"input_ids": ids, "attention_mask": am, "labels": torch.tensor([x["label"] for x in items])}


def _model(tiny_cfg):
    return bertfam.build_model(tiny_cfg.replace(head=HeadConfig(task="classification", num_labels=2)), seed=1)


def _acc(data):
    def f(model):
        b = _collate(data)
        return {"accuracy": float((model(b["input_ids"], b["attention_mask"]).logits.argmax(-1) == b["labels"]).float().mean())}
    return f


def test_trainer_learns_and_writes(tmp_path, tiny_cfg):
    data = _data()
    m = _model(tiny_cfg)
    tc = TrainConfig(out_dir=str(tmp_path), epochs=6, batch_size=8, lr=1e-3, log_every=2, progress=False,
                     metric_for_best="accuracy")
    s = Trainer(m, tc, data, _collate, eval_fn=_acc(data)).train()
    assert s["steps"] == 36
    recs = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
    losses = [r["loss"] for r in recs if "loss" in r]
    assert losses[-1] < losses[0] * 0.5, losses
    evals = [r["eval_accuracy"] for r in recs if "eval_accuracy" in r]
    assert len(evals) == 6 and max(evals) == 1.0
    assert (tmp_path / "best" / "model.safetensors").exists() and (tmp_path / "model.safetensors").exists()
    assert all("tokens_per_s" in r for r in recs if "loss" in r)


def _train(tmp, tiny_cfg, resume=None, max_steps=10, save_every=0, accum=1, bs=8):
    torch.manual_seed(123)
    m = _model(tiny_cfg)
    tc = TrainConfig(out_dir=str(tmp), max_steps=max_steps, batch_size=bs, lr=5e-4, progress=False,
                     save_every=save_every, keep_last=10, grad_accum=accum, group_by_length=True)
    Trainer(m, tc, _data(), _collate, lengths=[len(x["ids"]) for x in _data()]).train(resume_from=resume)
    return m


def test_exact_resume_equals_uninterrupted(tmp_path, tiny_cfg):
    full = _train(tmp_path / "full", tiny_cfg, max_steps=10)  # dropout on: RNG state must be restored too
    part = tmp_path / "part"
    _train(part, tiny_cfg, max_steps=10, save_every=3)
    ckpt = part / "checkpoints" / "step-6"
    assert ckpt.exists()
    resumed = _train(tmp_path / "resumed", tiny_cfg, resume=str(ckpt), max_steps=10)
    for (k, a), (_, b) in zip(full.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), k
    # and resuming from a different step also matches
    resumed2 = _train(tmp_path / "resumed2", tiny_cfg, resume=str(part / "checkpoints" / "step-3"), max_steps=10)
    assert all(torch.equal(a, b) for a, b in zip(full.state_dict().values(), resumed2.state_dict().values()))


def test_checkpoint_rotation_and_latest(tmp_path, tiny_cfg):
    torch.manual_seed(0)
    tc = TrainConfig(out_dir=str(tmp_path), max_steps=9, batch_size=8, progress=False, save_every=2, keep_last=2)
    Trainer(_model(tiny_cfg), tc, _data(), _collate).train()
    names = sorted(os.listdir(tmp_path / "checkpoints"))
    assert names == ["step-8", "step-9"], names
    assert latest_checkpoint(str(tmp_path)).endswith("step-9")
    with pytest.raises(bertfam.CheckpointError):
        latest_checkpoint(str(tmp_path / "nothing"))


class _Recorder(TrainerCallback):
    def __init__(self):
        self.events = []

    def on_step_end(self, trainer):
        self.events.append(("step", trainer.state["step"]))

    def on_checkpoint(self, trainer, path):
        assert os.path.isfile(os.path.join(path, "trainer_state.pt"))  # complete when the hook runs
        self.events.append(("ckpt", os.path.basename(path)))


def test_callbacks_see_every_step_and_checkpoint(tmp_path, tiny_cfg):
    rec = _Recorder()
    tc = TrainConfig(out_dir=str(tmp_path), max_steps=5, batch_size=8, progress=False, save_every=2, keep_last=10)
    Trainer(_model(tiny_cfg), tc, _data(), _collate, callbacks=[rec]).train()
    assert rec.events == [("step", 1), ("ckpt", "step-2"), ("step", 2), ("step", 3), ("ckpt", "step-4"),
                          ("step", 4), ("step", 5), ("ckpt", "step-5")]  # the last one: the final save


class _GradRecorder(Trainer):
    """Records the gradients the optimizer is handed at each step (after accumulation)."""

    def _setup(self):
        super()._setup()
        self.grads, step = [], self.optim.step

        def recording_step(*a, **k):
            self.grads.append([p.grad.detach().clone() for p in self.model.parameters()])
            return step(*a, **k)
        self.optim.step = recording_step


def _accumulated_grads(tmp_path, cfg, data, bs, acc):
    m = bertfam.build_model(cfg.replace(head=HeadConfig(task="classification", num_labels=2)), seed=1)
    tc = TrainConfig(out_dir=str(tmp_path / f"{bs}x{acc}"), max_steps=1, batch_size=bs, grad_accum=acc, lr=1e-3,
                     max_grad_norm=None, progress=False, shuffle=False, save_final=False)
    t = _GradRecorder(m, tc, data, _collate)
    t.train()
    return t.grads[0]


def test_grad_accumulation_matches_big_batch(tmp_path, tiny_cfg):
    # Compare the gradient of one optimizer step, not parameters after AdamW: AdamW divides by sqrt(v), which
    # turns float32 summation-order noise in near-zero gradients into 1e-5 parameter differences (seen on
    # AVX-512). The gradients themselves agree to float32 reduction order.
    cfg = tiny_cfg.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    data = [dict(x, ids=x["ids"][:4]) for x in _data()]  # equal lengths: mean of means == mean
    big = _accumulated_grads(tmp_path, cfg, data, 16, 1)
    for bs, acc in ((8, 2), (4, 4)):
        small = _accumulated_grads(tmp_path, cfg, data, bs, acc)
        for a, b in zip(big, small):
            # float summation order differs between batch sizes (and between CPU kernels): 1e-5 of the largest
            # entry; a wrong accumulation moves gradients by whole factors
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-5 * float(a.abs().max()) + 1e-9)
    # the check can fail: the gradient of the first micro-batch alone (an accumulation that kept only one
    # micro-batch, or summed instead of averaged, would look like this) is far from the big batch's
    half = _accumulated_grads(tmp_path, cfg, data[:8], 8, 1)
    assert max(float((a - b).abs().max() / (a.abs().max() + 1e-12)) for a, b in zip(big, half)) > 1e-2


def test_batch_plan_sharding_and_grouping():
    lengths = [i % 17 + 1 for i in range(100)]
    p0 = BatchPlan(100, 8, seed=1, lengths=lengths, rank=0, world=2)
    p1 = BatchPlan(100, 8, seed=1, lengths=lengths, rank=1, world=2)
    b0, b1 = p0.batches(0), p1.batches(0)
    assert len(b0) == len(b1) == len(p0) == 6
    assert not set(sum(b0, [])) & set(sum(b1, []))
    assert p0.batches(0) == b0 and p0.batches(1) != b0  # deterministic per epoch, different across epochs
    spread = [max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in b0]
    assert sum(spread) / len(spread) < 6  # grouped by length: little padding


def test_no_decay_groups_and_layerwise_lr(tiny_cfg):
    m = _model(tiny_cfg)
    groups = param_groups(m, lr=1.0, weight_decay=0.1, layerwise_lr_decay=0.5)
    names = {id(p): n for n, p in m.named_parameters()}
    for g in groups:
        for p in g["params"]:
            n = names[id(p)]
            assert (g["weight_decay"] == 0.0) == (p.dim() < 2 or "norm" in n)
            if "embeddings" in n:
                assert g["lr"] == 0.5 ** 3
            if n.startswith("classifier."):
                assert g["lr"] == 1.0


def test_head_lr_applies_to_the_pooler_and_head_only(tiny_cfg):
    """head_lr: the pooler and the head train at their own peak lr, the layers keep the (decayed) lr."""
    m = _model(tiny_cfg)
    groups = param_groups(m, lr=1.0, weight_decay=0.1, layerwise_lr_decay=0.5, head_lr=20.0)
    names = {id(p): n for n, p in m.named_parameters()}
    seen = set()
    for g in groups:
        for p in g["params"]:
            n = names[id(p)]
            head = n.startswith("classifier.") or "pooler" in n
            assert (g["lr"] == 20.0) == head, n
            seen.add(head)
    assert seen == {True, False}


def test_empty_data_and_bad_config(tmp_path, tiny_cfg):
    with pytest.raises(bertfam.DataError):
        Trainer(_model(tiny_cfg), TrainConfig(out_dir=str(tmp_path)), [], _collate)
    with pytest.raises(bertfam.ConfigError):
        Trainer(_model(tiny_cfg), TrainConfig(out_dir=str(tmp_path), precision="fp8"), _data(), _collate)


# ------------------------------------------------------------------ lean checkpoints
def _dir_bytes(path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def _run(out, tiny_cfg, **kw):
    torch.manual_seed(0)
    tc = TrainConfig(out_dir=str(out), max_steps=4, batch_size=8, progress=False, **kw)
    Trainer(_model(tiny_cfg), tc, _data(), _collate, eval_fn=_acc(_data())).train()


def test_checkpoints_without_optimizer_state_are_smaller_and_refuse_resume(tmp_path, tiny_cfg):
    _run(tmp_path / "full", tiny_cfg, save_every=2, keep_last=0)
    _run(tmp_path / "lean", tiny_cfg, save_every=2, keep_last=0, save_optimizer_state=False)
    full, lean = tmp_path / "full" / "checkpoints", tmp_path / "lean" / "checkpoints"
    assert sorted(os.listdir(full)) == sorted(os.listdir(lean)) == ["step-2", "step-4"]  # keep_last=0: all
    # AdamW's two moments per weight: a full checkpoint is about three times a lean one
    assert _dir_bytes(lean / "step-4") * 2 < _dir_bytes(full / "step-4")
    state = torch.load(lean / "step-4" / "trainer_state.pt", weights_only=False)
    assert "optimizer" not in state and state["trainer"]["step"] == 4
    with pytest.raises(bertfam.CheckpointError, match="without optimizer state.*cannot be resumed"):
        _train(tmp_path / "again", tiny_cfg, resume=str(tmp_path / "lean"))


def test_no_checkpoints_writes_only_the_final_and_best_models(tmp_path, tiny_cfg):
    _run(tmp_path, tiny_cfg, checkpoints=False, metric_for_best="accuracy")
    assert not (tmp_path / "checkpoints").exists()
    assert (tmp_path / "model.safetensors").exists() and (tmp_path / "best" / "model.safetensors").exists()


@pytest.mark.parametrize("kw", [dict(keep_last=-1), dict(checkpoints=False, save_every=2),
                                dict(save_optimizer_state="no"), dict(log_every=0)])
def test_checkpoint_options_are_validated(tmp_path, kw):
    with pytest.raises(bertfam.ConfigError):
        TrainConfig(out_dir=str(tmp_path), **kw).validate()


# ------------------------------------------------------------------ console lines
def test_console_lines_without_a_terminal(tmp_path, tiny_cfg, caplog):
    """stderr is no tty under pytest: no tqdm bar, one INFO line per log_every steps and one per evaluation."""
    caplog.set_level(logging.INFO, logger="bertfam.progress")
    data = _data()
    tc = TrainConfig(out_dir=str(tmp_path), max_steps=6, batch_size=8, log_every=2, progress=True,
                     eval_every=3, save_final=False)
    Trainer(_model(tiny_cfg), tc, data, _collate, eval_fn=_acc(data)).train()
    lines = [r.getMessage() for r in caplog.records if r.name == "bertfam.progress" and r.levelno == logging.INFO]
    steps = [m for m in lines if m.startswith("step ")]
    assert [m.split(":")[0] for m in steps] == ["step 2/6", "step 4/6", "step 6/6"], lines
    assert all(" loss " in m and " lr " in m and "tokens/s" in m for m in steps)
    evals = [m for m in lines if m.startswith("eval ")]
    assert [m.split(":")[0] for m in evals] == ["eval step 3", "eval step 6"] and "accuracy" in evals[0], lines


def test_cli_shows_progress_lines_without_verbose(tmp_path):
    """Without -v the CLI logs at WARNING; the progress logger alone stays at INFO so its lines show."""
    from bertfam import cli

    logger = logging.getLogger("bertfam.progress")
    old = logger.level
    try:
        logger.setLevel(logging.NOTSET)
        assert cli.main(["kbert", "show", "--kg", str(tmp_path / "none.spo"), "--tokenizer", str(tmp_path), "x"]) == 2
        assert logger.level == logging.INFO
    finally:
        logger.setLevel(old)
