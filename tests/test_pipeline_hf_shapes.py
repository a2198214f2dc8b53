"""bertfam's pipelines answer in the shapes of transformers' pipelines of the same task: the same tiny random
checkpoint (a Hugging Face directory, which bertfam loads as it is) run through both, outputs compared by
nesting and keys (bertfam's extras are extra keys), and by values where both decode the same way. The task
vocabulary is one: the names the pipelines take are the names `from_pretrained(task=...)` takes.

transformers 5 removed its question-answering pipeline; the question-answering shape checked is the one it
documented ({score, start, end, answer}, "" for no answer with handle_impossible_answer)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import bertfam
from bertfam import ConfigError, pipeline
from bertfam.tasks.pipelines import InputError

from .conftest import ZH_VOCAB

T = pytest.importorskip("transformers")

NER_ID2LABEL = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
CLS_ID2LABEL = {0: "neg", 1: "pos", 2: "neu"}
HF_QA_KEYS = {"score", "start", "end", "answer"}


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    """{"mlm", "ner", "cls", "qa"} -> a Hugging Face checkpoint directory with its fast tokenizer."""
    root = tmp_path_factory.mktemp("hf")
    tok = T.BertTokenizerFast(ZH_VOCAB)
    common = dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=37, max_position_embeddings=128)
    out = {}
    for name, cls, extra in [("mlm", T.BertForMaskedLM, {}),
                             ("ner", T.BertForTokenClassification, {"id2label": NER_ID2LABEL}),
                             ("cls", T.BertForSequenceClassification, {"id2label": CLS_ID2LABEL}),
                             ("qa", T.BertForQuestionAnswering, {})]:
        torch.manual_seed(len(out))
        cls(T.BertConfig(**common, **extra)).eval().save_pretrained(root / name)
        tok.save_pretrained(root / name)
        out[name] = str(root / name)
    return out


def _hf(task, d, **kw):
    return T.pipeline(task, d, device="cpu", **kw)


def _shape(x):
    """Nesting and keys of a pipeline output: [{"a", "b"}] -> ["a,b"]."""
    if isinstance(x, list):
        return [_shape(v) for v in x]
    if isinstance(x, dict):
        return ",".join(sorted(x))
    return type(x).__name__


def _keys_within(ours, theirs):
    """Same nesting; every transformers key present (ours may hold extra keys)."""
    if isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), (ours, theirs)
        for a, b in zip(ours, theirs):
            _keys_within(a, b)
    else:
        assert isinstance(ours, dict) and set(theirs) <= set(ours), (sorted(ours), sorted(theirs))


def test_fill_mask_has_transformers_shape_keys_and_answers(hf_dirs):
    hf, ours = _hf("fill-mask", hf_dirs["mlm"]), pipeline("fill-mask", hf_dirs["mlm"])
    for inputs in ("北京是[MASK]都", "北[MASK]是[MASK]都", ["北京是[MASK]都", "好[MASK]"]):
        a, b = hf(inputs, top_k=2), ours(inputs, top_k=2)
        assert _shape(b) == _shape(a), inputs  # exactly the keys: score, token, token_str, sequence
    a, b = hf("北京是[MASK]都", top_k=3), ours("北京是[MASK]都", top_k=3)
    assert [c["token"] for c in b] == [c["token"] for c in a] and [c["token_str"] for c in b] == [
        c["token_str"] for c in a]
    assert [c["score"] for c in b] == pytest.approx([c["score"] for c in a], rel=1e-4)
    assert all(c["sequence"] == "北京是" + c["token_str"].removeprefix("##") + "都" for c in b)  # the text, not
    # transformers' detokenised ids ("北 京 是 ... 都"): bertfam keeps the input's spacing


def test_token_classification_matches_transformers_aggregations(hf_dirs):
    text = "李明在北京大学读书"
    for task in ("ner", "token-classification"):
        assert pipeline(task, hf_dirs["ner"]).task == "ner"
    a = _hf("ner", hf_dirs["ner"], aggregation_strategy="simple")([text, "北京"])
    b = pipeline("ner", hf_dirs["ner"], aggregation_strategy="simple")([text, "北京"])
    assert len(b) == 2 and all(isinstance(x, list) for x in b)
    for ents in b:
        for e in ents:
            assert set(e) == {"entity_group", "score", "word", "start", "end"}
    assert all(set(e) == {"entity_group", "score", "word", "start", "end"} for ents in a for e in ents)
    # "none" (transformers' default): one entry per token not tagged O, the same tags as transformers
    a = _hf("ner", hf_dirs["ner"])(text)
    b = pipeline("ner", hf_dirs["ner"])(text, aggregation_strategy="none")
    strip = [{k: e[k] for k in ("entity", "index", "word", "start", "end")} for e in a]
    assert [{k: e[k] for k in ("entity", "index", "word", "start", "end")} for e in b] == strip and strip
    assert [e["score"] for e in b] == pytest.approx([float(e["score"]) for e in a], rel=1e-4)
    # bertfam's default is "simple": spans decoded as BIO tags, in the shape transformers gives for "simple"
    default = pipeline("ner", hf_dirs["ner"])(text)
    assert default and all(set(e) == {"entity_group", "score", "word", "start", "end"} for e in default)
    assert all(e["word"] == text[e["start"]:e["end"]] for e in default)
    with pytest.raises(InputError, match="aggregation_strategy: must be one of simple, none"):
        pipeline("ner", hf_dirs["ner"])(text, aggregation_strategy="first")


def test_text_classification_shapes_and_top_k_match_transformers(hf_dirs):
    hf, ours = _hf("text-classification", hf_dirs["cls"]), pipeline("text-classification", hf_dirs["cls"])
    cases = [("好", {}), (["好", "坏"], {}), ("好", {"top_k": 2}), ("好", {"top_k": None}),
             (["好", "坏"], {"top_k": 2}), ({"text": "好", "text_pair": "坏"}, {})]
    for inputs, kw in cases:
        a, b = hf(inputs, **kw), ours(inputs, **kw)
        _keys_within(b, a)
        flat_a = a if isinstance(a, list) else [a]
        flat_b = b if isinstance(b, list) else [b]
        for x, y in zip(flat_a, flat_b):
            for p, q in (zip(x, y) if isinstance(x, list) else [(x, y)]):
                assert q["label"] == p["label"] and q["score"] == pytest.approx(p["score"], rel=1e-4), (inputs, kw)
    [one] = ours("好")
    assert set(one) == {"label", "score", "probabilities", "truncated"}  # the extras stay, as extra keys
    assert [r["label"] for r in ours("好", top_k=None)] == sorted(CLS_ID2LABEL.values(),
                                                                 key=lambda n: -one["probabilities"][n])
    with pytest.raises(InputError, match="top_k: must be an integer >= 1 or None"):
        ours("好", top_k=0)


def test_question_answering_call_forms_and_shape(hf_dirs):
    qa = pipeline("question-answering", hf_dirs["qa"])
    q, c = "谁在北京？", "李明在北京大学读书。"
    a = qa(question=q, context=c)
    assert HF_QA_KEYS <= set(a) and set(a) - HF_QA_KEYS == {"answerable"}
    assert qa({"question": q, "context": c}) == a == qa({"question": q, "passage": c})
    assert qa(question=[q, q], context=[c, "北京是首都。"])[0] == a
    assert qa([{"question": q, "context": c}]) == [a]
    assert (a["answer"] == c[a["start"]:a["end"]]) if a["answerable"] else (a["answer"], a["start"], a["end"]) == (
        "", 0, 0)
    with pytest.raises(InputError, match="lists of questions and contexts must have the same length"):
        qa(question=[q, q], context=[c])
    with pytest.raises(InputError, match="^question: required"):
        qa(context=c)


def test_question_answering_top_k_lists_the_best_spans_best_first(hf_dirs):
    import math

    qa = pipeline("question-answering", hf_dirs["qa"])
    q, c = "谁在北京？", "李明在北京大学读书，王芳在上海工作。"
    for forced, null in (("answered", -math.inf), ("declined", math.inf)):
        qa.inner.settings = dataclasses.replace(qa.inner.settings, null_threshold=null, answerable_threshold=0.0)
        one = qa(question=q, context=c)
        top = qa(question=q, context=c, top_k=3)
        assert isinstance(top, list) and len(top) == 3 and top[0] == one, forced
        assert all(HF_QA_KEYS <= set(a) for a in top)
        spans = top[1:] if forced == "declined" else top
        assert all(a["answer"] == c[a["start"]:a["end"]] and a["answer"] for a in spans)
        assert [a["score"] for a in spans] == sorted((a["score"] for a in spans), reverse=True)
        assert all(a["answerable"] is (forced == "answered") for a in top)
        if forced == "declined":
            assert (top[0]["answer"], top[0]["start"], top[0]["end"]) == ("", 0, 0)
    assert len(qa([{"question": q, "context": c}] * 2, top_k=2)) == 2  # a list of inputs: a list per input
    with pytest.raises(InputError, match="^top_k: must be an integer >= 1"):
        qa(question=q, context=c, top_k=0)
    with pytest.raises(InputError, match=r"^top_k: at most \d+ \(the model's n_best\)"):
        qa(question=q, context=c, top_k=1000)


def test_no_answer_is_transformers_empty_answer_in_python_and_null_over_http(hf_dirs):
    qa = pipeline("mrc", hf_dirs["qa"])
    item = {"question": "谁？", "passage": "今天天气很好。"}
    raw = qa.predict_batch([item])[0]  # what the HTTP API returns
    none = dict(raw, answer=None, start=None, end=None, answerable=False)
    assert qa.present(none, item) == {"score": raw["score"], "start": 0, "end": 0, "answer": "",
                                      "answerable": False}


def test_one_task_vocabulary_for_pipelines_and_from_pretrained(hf_dirs):
    for name, head in [("ner", "token"), ("token-classification", "token"), ("text-classification",
                       "classification"), ("question-answering", "span"), ("mrc", "span"), ("fill-mask", "mlm")]:
        m = bertfam.from_pretrained(hf_dirs["mlm"], task=name, **({"labels": ["O", "B-X"]} if head == "token" else {}))
        assert m.task == head, name
        assert pipeline(name, m).task in ("ner", "classification", "mrc", "fill-mask")
    assert bertfam.from_pretrained(hf_dirs["mlm"], task="feature-extraction").task is None
    with pytest.raises(ConfigError, match="unknown task 'nerd'; valid tasks: encoder, .* pipeline names ner, "):
        bertfam.from_pretrained(hf_dirs["mlm"], task="nerd")


def test_a_fresh_head_is_named_in_a_warning(hf_dirs, caplog):
    with caplog.at_level("WARNING", logger="bertfam"):
        bertfam.from_pretrained(hf_dirs["mlm"], task="text-classification", labels=["a", "b"])
    msg = [r.getMessage() for r in caplog.records if "newly initialised" in r.getMessage()]
    assert msg and "classifier.classifier.weight, classifier.classifier.bias" in msg[0], msg
    assert "train the model before trusting its predictions" in msg[0]
