"""ONNX export of every task head: dynamic batch and length axes, onnxruntime == PyTorch within 1e-4.

One export per head (each costs a few seconds of tracing); the span head goes through the CLI."""
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import bertfam  # noqa: E402
from bertfam import HeadConfig, preset  # noqa: E402
from bertfam.export.onnx import export_onnx, onnx_session, output_names, verify_onnx  # noqa: E402

# (task, family preset): the families vary so that RoBERTa's pad-skipping positions and ALBERT's
# factorized, shared layers are exported too
CASES = [(None, "bert-tiny"), ("mlm", "bert-tiny"), ("pretraining", "albert-base"),
         ("classification", "roberta-base"), ("regression", "bert-tiny"), ("token", "albert-base")]
SHAPES = ((1, 5), (3, 17), (2, 32))  # none of them is the (2, 8) example used for tracing


def tiny(task, family, vocab_size=60):
    head = HeadConfig(task=task, num_labels=3, labels=["a", "b", "c"],
                      pair_objective="sop" if task == "pretraining" else None)
    kw = dict(vocab_size=vocab_size, hidden_size=16, num_attention_heads=2, intermediate_size=32,
              num_hidden_layers=2, max_position_embeddings=40, head=head)
    if family == "albert-base":
        kw.update(embedding_size=8, num_hidden_groups=1)
    return bertfam.build_model(preset(family, **kw), seed=3).eval()


def check_onnx(path, model):
    """Symbolic batch/length axes, the head's outputs, onnxruntime == PyTorch, config in the metadata."""
    import onnx

    sess = onnx_session(path)
    for i in sess.get_inputs():  # both axes symbolic, not fixed to the tracing example
        assert len(i.shape) == 2 and all(isinstance(d, str) for d in i.shape), i
    assert [o.name for o in sess.get_outputs()] == output_names(model)
    diffs = verify_onnx(path, model, SHAPES, session=sess)
    assert set(diffs) == set(output_names(model))
    assert max(diffs.values()) <= 1e-4, diffs
    meta = {p.key: p.value for p in onnx.load(path).metadata_props}
    assert meta["bertfam_task"] == str(model.task)
    return meta


@pytest.mark.parametrize("task,family", CASES, ids=[str(t) for t, _ in CASES])
def test_export_every_head_matches_pytorch(tmp_path, task, family):
    model = tiny(task, family)
    path = str(tmp_path / "m.onnx")
    info = export_onnx(model, path)
    assert info["inputs"] == (["input_ids", "attention_mask", "token_type_ids"])
    meta = check_onnx(path, model)
    assert '"labels": ["a", "b", "c"]' in meta["bertfam_config"]


def test_cli_exports_the_span_head_and_checks_it(tmp_path, capsys, zh_vocab):
    from bertfam.cli import main

    tok = bertfam.Tokenizer.from_vocab(zh_vocab)
    model = tiny("span", "bert-tiny", vocab_size=tok.vocab_size)
    model.save_pretrained(str(tmp_path / "span"), tokenizer=tok)
    out = tmp_path / "out" / "span.onnx"
    assert main(["export", "--onnx", str(tmp_path / "span"), str(out)]) == 0
    text = capsys.readouterr().out
    assert "start_logits" in text and "answerable_logits" in text and "max abs difference" in text
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["span.onnx"]  # written atomically, no leftovers
    check_onnx(str(out), bertfam.from_pretrained(str(tmp_path / "span")))
    assert main(["export", "--onnx", str(tmp_path / "nowhere"), str(tmp_path / "x.onnx")]) == 2
    assert "nowhere" in capsys.readouterr().err and not (tmp_path / "x.onnx").exists()


def test_cli_task_choices_and_the_bare_encoder(tmp_path, capsys):
    """--task takes the heads docs/serving.md lists: `encoder` exports the backbone without the checkpoint's
    head; a name outside the list fails while parsing, naming the choices (exit code 2)."""
    from bertfam.cli import main

    tiny("token", "bert-tiny").save_pretrained(str(tmp_path / "tok"))
    with pytest.raises(SystemExit) as e:
        main(["export", "--onnx", str(tmp_path / "tok"), str(tmp_path / "x.onnx"), "--task", "bogus"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'bogus'" in err and "'encoder', 'mlm'" in err and "Traceback" not in err
    assert not (tmp_path / "x.onnx").exists()
    out = tmp_path / "enc.onnx"
    assert main(["export", "--onnx", str(tmp_path / "tok"), str(out), "--task", "encoder"]) == 0
    assert "task encoder" in capsys.readouterr().out
    bare = bertfam.from_pretrained(str(tmp_path / "tok"), task="encoder")
    meta = check_onnx(str(out), bare)
    assert output_names(bare) == ["last_hidden_state", "pooler_output"] and meta["bertfam_task"] == "None"


def test_cli_exports_bertfam_int8_checkpoints(tmp_path, capsys):
    """A `bertfam quantize` checkpoint exports: int8 word embeddings (weight-only, as the shipped MRC model
    has them) as the float graph of the weights they stand for, equal to the int8 model; int8 linear layers
    (int8 activations too) only with --int8, and without it one line saying so."""
    from bertfam.cli import main

    tiny("span", "bert-tiny").save_pretrained(str(tmp_path / "f"))
    assert main(["quantize", str(tmp_path / "f"), str(tmp_path / "emb8"), "--modules", "embeddings.word"]) == 0
    assert main(["quantize", str(tmp_path / "f"), str(tmp_path / "all8")]) == 0
    capsys.readouterr()
    assert main(["export", "--onnx", str(tmp_path / "emb8"), str(tmp_path / "emb8.onnx")]) == 0
    assert "onnxruntime vs PyTorch, max abs difference" in capsys.readouterr().out
    int8 = bertfam.from_pretrained(str(tmp_path / "emb8"))
    assert int8.config.quantization is not None
    check_onnx(str(tmp_path / "emb8.onnx"), int8)  # against the int8 model itself, <= 1e-4

    assert main(["export", "--onnx", str(tmp_path / "all8"), str(tmp_path / "all8.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "linear layers are int8" in err and "--int8" in err, err
    assert not (tmp_path / "all8.onnx").exists()
    assert main(["export", "--onnx", str(tmp_path / "all8"), str(tmp_path / "all8.onnx"), "--int8"]) == 0
    out = capsys.readouterr().out
    assert "onnxruntime int8 vs PyTorch (bertfam int8)" in out, out
    assert onnx_session(str(tmp_path / "all8.onnx")).get_outputs()[0].name == "start_logits"
