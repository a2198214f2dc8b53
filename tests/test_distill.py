"""TinyBERT distillation: losses, projection, layer mapping, pipelines and augmentation."""
import copy
import json
import os

import pytest
import torch
import torch.nn.functional as F

from bertfam import ConfigError, HeadConfig, Tokenizer, build_model, from_pretrained, preset
from bertfam.distill import DistillConfig, DistillModel, attention_mse, soft_cross_entropy, uniform_layer_map
from bertfam.distill.augment import MLMAugmenter
from bertfam.distill.pipeline import distill_general, distill_task
from bertfam.training import TrainConfig

from .conftest import FIXTURES, ZH_VOCAB


def cfg(hidden=32, layers=2, heads=2, task="classification", vocab=120, **kw):
    return preset("bert-tiny", vocab_size=vocab, num_hidden_layers=layers, hidden_size=hidden,
                  num_attention_heads=heads, intermediate_size=2 * hidden, max_position_embeddings=64,
                  head=HeadConfig(task=task, num_labels=3), **kw)


def batch(B=3, T=9, vocab=120, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (B, T), generator=g)
    am = torch.ones(B, T, dtype=torch.long)
    am[1, 6:] = 0  # padding: huge negative masked scores must not count
    am[2, 4:] = 0
    ids[am == 0] = 0
    return {"input_ids": ids, "attention_mask": am, "labels": torch.tensor([0, 2, 1])}


@pytest.mark.parametrize("stage", ["general", "intermediate", "prediction"])
def test_losses_zero_when_student_is_teacher(stage):
    teacher = build_model(cfg(layers=3), seed=1)
    dm = DistillModel(copy.deepcopy(teacher), teacher, DistillConfig(stage=stage, temperature=2.0)).eval()
    out = dm(**batch())
    assert out.loss.item() == 0.0 and all(v == 0.0 for v in out.parts.values())
    assert set(out.parts) == ({"pred"} if stage == "prediction" else {"emb", "hidden", "attn"})
    # and not zero once the student differs
    dm2 = DistillModel(build_model(cfg(layers=3), seed=2), teacher, DistillConfig(stage=stage)).eval()
    assert all(v > 0 for v in dm2(**batch()).parts.values())


def test_gradients_reach_the_projection_and_not_the_teacher():
    teacher = build_model(cfg(hidden=64, layers=4, heads=2), seed=1)
    student = build_model(cfg(hidden=32, layers=2, heads=2), seed=2)
    dm = DistillModel(student, teacher, DistillConfig(stage="intermediate"))
    assert dm.proj is not None and dm.layer_map == [2, 4]
    dm.train()
    assert not teacher.training  # dropout stays off in the frozen teacher
    dm(**batch()).loss.backward()
    assert dm.proj.weight.grad is not None and dm.proj.weight.grad.abs().sum() > 0
    assert student.backbone.embeddings.word.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in teacher.parameters())


def test_wider_student_without_projection_is_a_clear_error():
    teacher, student = build_model(cfg(hidden=32)), build_model(cfg(hidden=64))
    with pytest.raises(ConfigError, match="wider than the teacher"):
        DistillModel(student, teacher, DistillConfig(projection="none"))
    with pytest.raises(ConfigError, match="attention heads"):
        DistillModel(build_model(cfg(heads=4)), teacher)
    dm = DistillModel(build_model(cfg(heads=4)), teacher, DistillConfig(head_mismatch="mean"))
    assert dm(**batch()).parts["attn"] > 0
    with pytest.raises(ConfigError, match="layer map"):
        DistillModel(build_model(cfg()), teacher, DistillConfig(layer_map=[1, 5]))


def test_layer_map_and_masked_attention_scores():
    assert uniform_layer_map(4, 12) == [3, 6, 9, 12] and uniform_layer_map(6, 12) == [2, 4, 6, 8, 10, 12]
    s, t = torch.randn(2, 3, 5, 5), torch.randn(2, 3, 5, 5)
    valid = torch.zeros(2, 1, 5, 5, dtype=torch.bool)
    valid[:, :, :3, :3] = True
    t2 = t.clone()
    t2[:, :, 3:, :] = torch.finfo(torch.float32).min  # what the backbone leaves at padding
    assert attention_mse(s, t, valid) == attention_mse(s, t2, valid)
    assert torch.isclose(attention_mse(s, t, valid), ((s - t)[..., :3, :3] ** 2).mean())


def test_soft_cross_entropy_has_the_soft_ce_gradient():
    s = torch.randn(4, 3, requires_grad=True)
    t = torch.randn(4, 3)
    assert soft_cross_entropy(t, t, 2.0).item() == pytest.approx(0.0, abs=1e-7)
    soft_cross_entropy(s, t, 2.0).backward()
    g1 = s.grad.clone()
    s.grad = None
    (-(F.softmax(t / 2, -1) * F.log_softmax(s / 2, -1)).sum(-1).mean()).backward()  # TinyBERT's soft CE
    assert torch.allclose(g1, s.grad, atol=1e-6)


# ---------------------------------------------------------------- pipelines on fixtures
@pytest.fixture(scope="module")
def zh_teacher(tmp_path_factory):
    """A tiny random 'fine-tuned' teacher with the Chinese vocabulary and a 2-class head."""
    d = str(tmp_path_factory.mktemp("teacher"))
    c = preset("bert-tiny", vocab_size=21128, num_hidden_layers=4, hidden_size=32, num_attention_heads=2,
               intermediate_size=64, max_position_embeddings=64,
               head=HeadConfig(task="classification", num_labels=2, labels=["0", "1"]))
    build_model(c, seed=3).save_pretrained(d, tokenizer=Tokenizer.from_vocab(ZH_VOCAB))
    return d


def student_json(tmp_path):
    p = tmp_path / "student.json"
    p.write_text(json.dumps({**cfg(hidden=16, layers=2, heads=2, task=None).to_dict(), "head": {}}))
    return str(p)


def test_task_distillation_end_to_end(zh_teacher, tmp_path):
    data = os.path.join(FIXTURES, "kbert", "chnsenticorp.tsv")
    out = str(tmp_path / "student")
    s = distill_task(zh_teacher, student_json(tmp_path), "chnsenticorp", data, data, out, max_length=32,
                     train=TrainConfig(batch_size=8, max_steps=1, progress=False, log_every=1))
    assert s["stage1"]["steps"] == 1 and s["stage2"]["steps"] == 1
    assert 0.0 <= s["student_dev"]["accuracy"] <= 100.0 and s["teacher_infer_s"] > 0
    st = from_pretrained(out)
    assert st.config.hidden_size == 16 and st.config.vocab_size == 21128 and st.task == "classification"
    assert st.tokenizer is not None and s["student_parameters"] < s["teacher_parameters"]
    metrics = [json.loads(x) for x in open(os.path.join(out, "stage1-intermediate", "metrics.jsonl"))]
    assert {"emb", "hidden", "attn"} <= set(metrics[0])  # per-term losses are logged


def test_general_distillation_keeps_projection_in_checkpoints(zh_teacher, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"今天天气很好，我们去公园散步{i}次。\n这本书写得很好看。\n\n" for i in range(40)),
                      encoding="utf-8")
    out = str(tmp_path / "general")
    s = distill_general(zh_teacher, student_json(tmp_path), [str(corpus)], out, max_length=32,
                        train=TrainConfig(batch_size=8, max_steps=3, progress=False))
    assert s["steps"] == 3
    from safetensors import safe_open

    ck = os.path.join(out, "checkpoints", "step-3", "model.safetensors")
    with safe_open(ck, "pt") as f:
        assert any(k.startswith("distill.proj.") for k in f.keys())  # resumable with its projection
    with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
        assert not any(k.startswith("distill.") for k in f.keys())  # the released student is clean
    assert from_pretrained(out).task is None


def test_mlm_augmentation():
    tok = Tokenizer.from_vocab(ZH_VOCAB)
    mlm = build_model(preset("bert-tiny", vocab_size=21128, num_hidden_layers=1, max_position_embeddings=64,
                             head=HeadConfig(task="mlm")), seed=0)
    from bertfam.data.labelled import Example

    ex = [Example("a", text_a="今天天气很好", label="1"), Example("b", text_a="这本书不好看", label="0")]
    keep = MLMAugmenter(mlm, tok, top_k=3, p_replace=0.0, n_aug=2).augment(ex)
    assert [e.text_a.replace(" ", "") for e in keep] == ["今天天气很好", "这本书不好看"] * 1 + ["今天天气很好"] * 2 \
        + ["这本书不好看"] * 2
    aug = MLMAugmenter(mlm, tok, top_k=3, p_replace=1.0, n_aug=3, seed=1)
    ids = tok.encode("今天天气很好")
    cands = aug.candidates(ids)
    assert sorted(cands) == [1, 2, 3, 4, 5, 6] and all(len(c) == 3 for c in cands.values())
    out = aug.augment(ex[:1])
    assert len(out) == 4 and [e.label for e in out] == ["1"] * 4
    for e in out[1:]:
        new = tok.encode(e.text_a)[1:-1]
        assert len(new) == 6 and all(n in cands[p + 1] for p, n in enumerate(new))
    with pytest.raises(ConfigError, match="masked-LM head"):
        MLMAugmenter(build_model(cfg()), tok)


def test_cli_wider_student_without_projection(zh_teacher, tmp_path, capsys):
    from bertfam.cli import main

    wide = tmp_path / "wide.json"
    wide.write_text(json.dumps({**cfg(hidden=64, layers=2, heads=2, task=None).to_dict(), "head": {}}))
    data = os.path.join(FIXTURES, "kbert", "chnsenticorp.tsv")
    rc = main(["distill", "--teacher", zh_teacher, "--student-config", str(wide), "--task", "chnsenticorp",
               "--train", data, "--out", str(tmp_path / "o"), "--projection", "none", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "student (hidden 64) is wider than the teacher (hidden 32)" in err
    rc = main(["distill", "--teacher", zh_teacher, "--task", "chnsenticorp", "--train", data, "--out",
               str(tmp_path / "o"), "--layer-map", "1,x"])
    assert rc == 2 and "--layer-map" in capsys.readouterr().err
