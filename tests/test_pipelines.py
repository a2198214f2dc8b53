"""`bertfam.pipeline`: one object per task, batching that does not change answers, readable labels, the
same objects behind `serve`, and clear errors for a wrong task, head, option or input."""
from __future__ import annotations

import os

import pytest

import bertfam
from bertfam import ConfigError, pipeline
from bertfam.tasks.pipelines import ClassificationPipeline, InputError, MRCPipeline

from .conftest import FIXTURES
from .serving_helpers import CLS_LABELS, NER_LABELS, make_tiny_models


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return make_tiny_models(str(tmp_path_factory.mktemp("pipes")))


TEXTS = ["这家餐厅的菜很好吃。", "李明在北京大学读书。", "今天", "股市今天大跌，投资者纷纷卖出手中的股票。", "好"]


def test_task_taken_from_the_head_and_aliases(dirs):
    assert pipeline(model=dirs["classification"]).task == "classification"
    assert pipeline(model=dirs["token"]).task == "ner"
    assert pipeline(model=dirs["mlm"]).task == "fill-mask"
    assert pipeline(model=dirs["span"]).task == "mrc"
    assert pipeline("text-classification", dirs["classification"]).task == "classification"
    assert pipeline("question-answering", dirs["span"]).task == "mrc"
    assert pipeline("feature-extraction", dirs["token"]).task == "embed"  # any model embeds, through its backbone


def test_wrong_task_head_or_option_is_one_clear_error(dirs):
    with pytest.raises(ConfigError, match="unknown pipeline task 'bogus'; valid: classification"):
        pipeline("bogus", dirs["classification"])
    with pytest.raises(ConfigError, match="a ner pipeline needs a token head; this model has a classification "
                                          "head .its pipeline is 'classification'"):
        pipeline("ner", dirs["classification"])
    with pytest.raises(ConfigError, match="unknown classification pipeline option.s.: doc_stride"):
        pipeline("classification", dirs["classification"], doc_stride=3)
    with pytest.raises(ConfigError, match="needs model="):
        pipeline("classification")
    with pytest.raises(ConfigError, match="batch_size must be >= 1"):
        pipeline(model=dirs["classification"], batch_size=0)


def test_classification_single_list_pairs_and_batching(dirs):
    clf = pipeline(model=dirs["classification"], batch_size=2)
    [one] = clf(TEXTS[0])  # a bare string: a list of one result, as transformers gives
    assert set(one) == {"label", "score", "probabilities", "truncated"} and one["label"] in CLS_LABELS
    assert abs(sum(one["probabilities"].values()) - 1) < 1e-5 and one["score"] == max(one["probabilities"].values())
    many = clf(TEXTS)  # 3 model calls of at most 2 items
    whole = pipeline(model=dirs["classification"], batch_size=64)(TEXTS)  # 1 call
    assert len(many) == len(TEXTS)
    for a, b in zip(many, whole):
        assert a["label"] == b["label"] and a["score"] == pytest.approx(b["score"], abs=1e-5)
    assert many[0]["score"] == pytest.approx(one["score"], abs=1e-5)
    pair = clf(("今天天气很好", "今天是晴天"))
    assert pair == clf({"text": "今天天气很好", "text_pair": "今天是晴天"})
    assert pair["score"] != pytest.approx(clf("今天天气很好")[0]["score"], abs=1e-7)  # the pair is read as a pair


def test_labels_with_readable_names_come_back_by_name(dirs, tmp_path):
    model = bertfam.from_pretrained(dirs["classification"])
    model.config.head.labels = ["104", "108"]
    model.config.head.label_descriptions = {"104": "news_finance", "108": "news_edu"}
    [res] = pipeline(model=model)("股市今天大跌")
    assert res["label"] in ("news_finance", "news_edu") and res["code"] == {"news_finance": "104",
                                                                         "news_edu": "108"}[res["label"]]
    assert set(res["probabilities"]) == {"news_finance", "news_edu"}


def test_finetune_keeps_tnews_label_descriptions(tmp_path):
    """Fine-tuning on a CLUE file with `label_desc` saves the names; the pipeline answers with them."""
    from bertfam.runners.finetune import FinetuneRunConfig, run_finetune

    from .serving_helpers import ZH_VOCAB

    tok = bertfam.Tokenizer.from_vocab(ZH_VOCAB)
    cfg = bertfam.preset("bert-tiny", vocab_size=tok.vocab_size, hidden_size=32, num_attention_heads=2,
                         intermediate_size=64, num_hidden_layers=1, max_position_embeddings=64)
    bertfam.build_model(cfg).save_pretrained(str(tmp_path / "base"), tokenizer=tok)
    data = os.path.join(FIXTURES, "finetune", "clue", "tnews.json")
    train = FinetuneRunConfig.default_train(max_steps=1, batch_size=4, progress=False)
    run_finetune(FinetuneRunConfig(task="tnews", model=str(tmp_path / "base"), train_file=data,
                                   out=str(tmp_path / "tn"), max_length=32, train=train))
    model = bertfam.from_pretrained(str(tmp_path / "tn"))
    descs = model.config.head.label_descriptions
    assert descs and all(k.isdigit() and v.startswith("news_") for k, v in descs.items())
    [res] = pipeline(model=model)("上课时学生手机响个不停")
    assert res["label"].startswith("news_") and res["code"].isdigit() and descs[res["code"]] == res["label"]


def test_ner_fill_mask_embed_and_mrc(dirs):
    ents = pipeline(model=dirs["token"])(TEXTS[:2])
    assert len(ents) == 2 and all(isinstance(e, list) for e in ents)
    for e in ents[0] + ents[1]:
        assert e["entity_group"] in {"PER", "LOC"} and e["end"] > e["start"]
        assert e["word"] == TEXTS[:2][0 if e in ents[0] else 1][e["start"]:e["end"]]
    fm = pipeline(model=dirs["mlm"])("北京是中国的[MASK]都。", top_k=3)
    assert len(fm) == 3 and all(c["sequence"] == f"北京是中国的{c['token_str'].removeprefix('##')}都。" for c in fm)
    vec = pipeline("embed", dirs["mlm"])(["今天天气很好", "今天"], normalize=True)
    assert len(vec) == 2 and sum(x * x for x in vec[0]["vector"]) == pytest.approx(1.0, abs=1e-5)
    qa = pipeline(model=dirs["span"])
    a = qa({"question": "中国的首都是哪里？", "context": "北京是中华人民共和国的首都。"})  # SQuAD's field name
    b = qa({"question": "中国的首都是哪里？", "passage": "北京是中华人民共和国的首都。"})
    assert a == b and set(a) == {"answer", "start", "end", "score", "answerable"}
    assert qa(question="中国的首都是哪里？", context="北京是中华人民共和国的首都。") == a  # transformers' call form


def test_bad_items_name_the_field(dirs):
    fm = pipeline(model=dirs["mlm"])
    with pytest.raises(InputError, match=r"^text: must contain at least one \[MASK\]"):
        fm("没有掩码")
    with pytest.raises(InputError, match=r"^\[1\]\.text: must contain"):
        fm(["北京是[MASK]都", "没有掩码"])
    with pytest.raises(InputError, match="top_k: must be an integer >= 1"):
        fm("北京是[MASK]都", top_k=0)
    with pytest.raises(InputError, match="^passage: must not be blank"):
        pipeline(model=dirs["span"])({"question": "谁？", "passage": "  "})
    with pytest.raises(InputError, match="^input: expected a string or a dict, got int"):
        pipeline(model=dirs["classification"])(3)
    with pytest.raises(InputError, match="^pooling: must be 'mean' or 'cls'"):
        pipeline("embed", dirs["mlm"])("今天", pooling="max")


def test_serve_answers_through_the_same_pipelines(dirs):
    from bertfam.serving import Service

    svc = Service.from_dirs([dirs["classification"], dirs["span"]])
    try:
        route = svc.routes["classify"]
        assert isinstance(route.predictor, ClassificationPipeline)
        assert isinstance(svc.routes["mrc"].predictor, MRCPipeline)
        [direct] = pipeline(model=dirs["classification"])(TEXTS[3])
        served = route.predictor.predict_batch([{"text": TEXTS[3], "text_pair": None}])[0]
        assert served["label"] == direct["label"] and served["score"] == pytest.approx(direct["score"], abs=1e-6)
    finally:
        svc.shutdown()
