"""Long work reports its progress: without a terminal, a line with the count, the rate and the time left
(`bertfam.progress.Progress`) for predict/evaluate, MRC prediction (mrc predict, the demo) and training;
on a terminal a tqdm bar instead. EVERY_S = 0 here: a line per update, so a tiny run shows them."""
import logging
import os

import pytest

import bertfam.progress as P

from .conftest import FIXTURES, ZH_VOCAB, cli


@pytest.fixture
def every_update(monkeypatch, caplog):
    monkeypatch.setattr(P, "EVERY_S", 0.0)
    caplog.set_level(logging.INFO, logger="bertfam.progress")
    return caplog


def _lines(caplog, prefix):
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(prefix)]


def test_progress_lines_carry_count_rate_and_time_left(every_update):
    with P.Progress(10, "work", unit="items", tty=False) as bar:
        bar.update(3)
        bar.set(10)
    lines = _lines(every_update, "work: ")
    assert lines[0].startswith("work: 3/10 items (30%), ") and " items/s" in lines[0] and lines[0].endswith(" left")
    assert lines[1].startswith("work: 10/10 items (100%)") and "left" not in lines[1]
    assert lines[-1].startswith("work: done, 10 items in ")
    assert P.eta(42) == "42 s" and P.eta(185) == "3 min 5 s" and P.eta(3720) == "1 h 02 min"


def test_quiet_when_short_or_disabled(caplog):
    caplog.set_level(logging.INFO, logger="bertfam.progress")
    with P.Progress(5, "short", tty=False) as bar:  # the default period: a run this short says nothing
        bar.update(5)
    with P.Progress(5, "off", enabled=False, every_s=0, tty=False) as bar:
        bar.update(5)
    assert not _lines(caplog, "short") and not _lines(caplog, "off")


def test_finetune_training_and_predict_report_progress(every_update, tmp_path, capsys):
    from bertfam import preset
    from bertfam.modeling import build_model
    from bertfam.tokenization import Tokenizer

    tok = Tokenizer.from_vocab(ZH_VOCAB)
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, hidden_size=32, num_attention_heads=2,
                 intermediate_size=64, num_hidden_layers=1, max_position_embeddings=64)
    build_model(cfg, seed=0).save_pretrained(str(tmp_path / "m"), tokenizer=tok)
    sst2 = os.path.join(FIXTURES, "finetune", "glue", "SST-2")
    rc, _, err = cli(capsys, "finetune", "--task", "sst2", "--model", tmp_path / "m", "--train",
                     os.path.join(sst2, "train.tsv"), "--dev", os.path.join(sst2, "dev.tsv"), "--out", tmp_path / "ft",
                     "--max-steps", "3", "--log-every", "1", "--batch-size", "8", "--max-length", "32", "--no-progress")
    assert rc == 0, err
    steps = _lines(every_update, "step ")
    assert steps and all(" steps/s" in s for s in steps) and steps[0].endswith(" left"), steps
    rc, _, err = cli(capsys, "predict", "--model", tmp_path / "ft", "--data", os.path.join(sst2, "test.tsv"),
                     "--out", tmp_path / "pred", "--batch-size", "4")
    assert rc == 0, err
    lines = _lines(every_update, "predict: ")
    assert lines and lines[0].startswith("predict: 4/8 inputs (50%)") and lines[0].endswith(" left"), lines


def test_mrc_prediction_reports_questions(every_update, tmp_path):
    from bertfam import from_pretrained
    from bertfam.data.mrc import MRCExample
    from bertfam.tasks.mrc import predict_examples, predictor_from_models

    from .serving_helpers import make_tiny_models

    d = make_tiny_models(str(tmp_path))["span"]
    pred = predictor_from_models([from_pretrained(d)], [d], batch_size=2)
    exs = [MRCExample(qid=str(i), question="谁在北京？", context="李明在北京大学读书。" * (i + 1)) for i in range(5)]
    preds, _, _ = predict_examples(pred, exs, progress=True)
    assert len(preds) == 5 and pred.on_progress is None
    lines = _lines(every_update, "mrc predict: ")
    assert lines and lines[-2].startswith("mrc predict: 5/5 questions (100%)") and "done" in lines[-1], lines
    assert any("/5 questions" in ln and ln.endswith(" left") for ln in lines)  # moving within the one chunk
