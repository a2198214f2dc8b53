"""Re-heading a fine-tuned checkpoint: new labels give a new head on the loaded backbone (as transformers'
ignore_mismatched_sizes), the same labels keep the trained head, a config/weights mismatch stays an error."""
from __future__ import annotations

import json
import logging
import os

import pytest
import torch

import bertfam
from bertfam import CheckpointError

from .conftest import FIXTURES
from .serving_helpers import CLS_LABELS, make_tiny_models


@pytest.fixture(scope="module")
def clf_dir(tmp_path_factory):
    return make_tiny_models(str(tmp_path_factory.mktemp("rehead")))["classification"]


def _head(model) -> dict:
    return {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("backbone.")}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_new_labels_give_a_new_head_on_the_same_backbone(clf_dir, caplog):
    saved = bertfam.from_pretrained(clf_dir)
    with caplog.at_level(logging.WARNING, logger="bertfam"):
        m = bertfam.from_pretrained(clf_dir, task="classification", labels=["a", "b", "c"], seed=1)
    assert m.config.head.num_labels == 3 and m.config.head.labels == ["a", "b", "c"]
    assert "labels [a, b, c] replace the checkpoint's [负面, 正面]" in caplog.text
    enc = m.tokenizer(["今天天气很好"])
    assert m(**{k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).logits.shape == (1, 3)
    sb, mb = saved.backbone.state_dict(), m.backbone.state_dict()
    assert all(torch.equal(sb[k], mb[k]) for k in sb)  # the backbone is the checkpoint's


def test_same_labels_keep_the_trained_head_other_order_does_not(clf_dir):
    saved = _head(bertfam.from_pretrained(clf_dir))
    assert _same(saved, _head(bertfam.from_pretrained(clf_dir, task="classification", labels=list(CLS_LABELS))))
    swapped = _head(bertfam.from_pretrained(clf_dir, task="classification", labels=CLS_LABELS[::-1], seed=3))
    assert not _same(saved, swapped)  # row 0 meant 负面; read as 正面 it would answer backwards


def test_config_weight_mismatch_is_an_error_unless_ignored(clf_dir, tmp_path):
    import shutil

    d = tmp_path / "edited"
    shutil.copytree(clf_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["head"]["num_labels"], cfg["head"]["labels"] = 3, ["x", "y", "z"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"classifier.* has shape \(2,?.*\) but config.json implies \(3,?.*\)"):
        bertfam.from_pretrained(str(d))
    m = bertfam.from_pretrained(str(d), ignore_mismatched_sizes=True)
    assert m.config.head.num_labels == 3


def test_finetune_a_finetuned_model_on_a_task_with_other_labels(clf_dir, tmp_path):
    """A 2-label sentiment model fine-tuned on TNEWS (15 labels): a CheckpointError before re-heading."""
    from bertfam.runners.finetune import FinetuneRunConfig, run_finetune

    data = os.path.join(FIXTURES, "finetune", "clue", "tnews.json")
    r = run_finetune(FinetuneRunConfig(task="tnews", model=clf_dir, train_file=data, out=str(tmp_path / "tn"),
                                       max_length=32, train=FinetuneRunConfig.default_train(max_steps=1, batch_size=4,
                                                                                           progress=False)))
    assert r["steps"] == 1
    assert len(bertfam.from_pretrained(str(tmp_path / "tn")).config.head.labels) == 15
