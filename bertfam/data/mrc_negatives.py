"""Hard unanswerable examples for extractive MRC, made from answerable ones.

DuReader-checklist's unanswerable questions come with a passage on the question's topic that does not
answer it. Two constructions imitate that:
- `similar_passage_negatives`: the question paired with the passage of ANOTHER question that is most
  similar to it (TF-IDF over character 1-2-grams, scikit-learn), skipping passages that contain one of the
  question's answers;
- `answer_removed_negative`: the question's own passage with every sentence that overlaps the answer
  removed (same topic, same page, no answer left).

`answer_sentence_example` is the answerable counterpart for short inputs: the question with only the
sentence that holds its answer (what a user pastes: "北京是中华人民共和国的首都。"), so that a reader trained
on 300-character crops that start mid-sentence also sees passages whose first word is the answer.
`copula_swapped_example` rewrites "X是ANSWER" as "ANSWER是X": real passages put the answer after 是 far more
often than before it, and a reader that never saw the answer as the subject declines "北京是中华人民共和国的首都。"
for "中国的首都是哪里？".
"""
from __future__ import annotations

import dataclasses
import re
from typing import Optional, Sequence

import numpy as np

from .mrc import MRCAnswer, MRCExample

# a sentence ends at Chinese or Western end punctuation (kept with its sentence) or a line break
_SENTENCE = re.compile(r"[^。！？!?；;\n]*[。！？!?；;\n]+|[^。！？!?；;\n]+$")


def sentences(text: str) -> list[tuple[int, int]]:
    """[start, end) character spans of the sentences of `text`, covering it without gaps."""
    return [(m.start(), m.end()) for m in _SENTENCE.finditer(text) if m.end() > m.start()]


# a clause ends at a comma, colon or sentence end
_CLAUSE = re.compile(r"[^，,。！？!?；;：:\n]+")
# stems that would not read as a subject once moved after 是 (connectives, hedges, pronouns)
_BAD_STEM_START = ("而", "但", "所以", "因此", "因为", "如果", "我", "你", "他", "她", "它", "这", "那", "其", "主要",
                   "一般", "真实", "可能", "应该", "就", "也", "还", "都", "即", "则", "并", "且", "或",
                   "虽", "尽管", "不过", "可是", "然而", "另外", "此外", "同时", "在", "当", "对于", "关于", "除了")
# ... or ending in an adverb that belongs with 是 (基本都是, 应该就是, 也不是)
_BAD_STEM_END = ("都", "就", "也", "还", "只", "才", "又", "不", "正", "总", "即", "便", "则", "应该", "可能", "大概",
                 "一般", "大约", "约",
                 "时", "后", "前")  # ... or a time clause (小猪出生时是粉灰色: no subject)


# ... but 都 ending a noun is no adverb (中国的首都是北京)
_CITY_DU = ("首都", "成都", "京都", "古都", "国都", "故都", "陪都", "帝都", "新都")


def copula_swapped_example(ex: MRCExample, max_stem: int = 30, max_answer: int = 20,
                           in_context: bool = False) -> Optional[MRCExample]:
    """`ex` whose first answer ends a clause of the form "X是ANSWER" (X: 2 to max_stem characters, no 是 of
    its own, not starting with a connective or pronoun, not ending in an adverb) as the one-sentence passage
    "ANSWER是X。", the answer now its first word; None for any other example.
    in_context: the clause is rewritten where it stands and the rest of the passage kept (the answer starts
    the clause, not the passage), so the pattern is also seen inside a longer text."""
    if ex.is_impossible or not ex.answers:
        return None
    ans, ctx = ex.answers[0], ex.context
    if ans.start < 1 or ctx[ans.start - 1] != "是" or len(ans.text) > max_answer or not ans.text.strip():
        return None
    clause = next((m for m in _CLAUSE.finditer(ctx) if m.start() <= ans.start and ans.end <= m.end()), None)
    if clause is None or clause.end() != ans.end:
        return None
    stem = ctx[clause.start():ans.start - 1].strip()
    adverb_end = stem.endswith(_BAD_STEM_END) and not stem.endswith(_CITY_DU)
    if not 2 <= len(stem) <= max_stem or "是" in stem or stem.startswith(_BAD_STEM_START) or adverb_end:
        return None
    if in_context:
        start = ctx.index(stem, clause.start())
        return dataclasses.replace(ex, qid=f"{ex.qid}:swapc", context=f"{ctx[:start]}{ans.text}是{stem}{ctx[ans.end:]}",
                                   answers=[MRCAnswer(ans.text, start)])
    return dataclasses.replace(ex, qid=f"{ex.qid}:swap", context=f"{ans.text}是{stem}。",
                               answers=[MRCAnswer(ans.text, 0)])


def answer_removed_negative(ex: MRCExample, min_chars: int = 40) -> Optional[MRCExample]:
    """`ex` with every sentence that overlaps one of its answers cut out, as an unanswerable example; None
    when fewer than `min_chars` characters would be left or the answer text still occurs in what is left."""
    if ex.is_impossible or not ex.answers:
        return None
    keep = []
    for a, b in sentences(ex.context):
        if not any(a < ans.end and ans.start < b for ans in ex.answers):
            keep.append(ex.context[a:b])
    rest = "".join(keep).strip()
    if len(rest) < min_chars or any(t and t in rest for t in ex.answer_texts):
        return None
    return dataclasses.replace(ex, qid=f"{ex.qid}:cut", context=rest, answers=[], is_impossible=True)


def similar_passage_negatives(examples: Sequence[MRCExample], pool: Optional[Sequence[MRCExample]] = None,
                              per_question: int = 1, rank: int = 0, seed: int = 0,
                              other_questions_only: bool = False) -> list[MRCExample]:
    """For each answerable example, `per_question` unanswerable copies whose passage is one of the passages
    of `pool` (default: the examples themselves) most similar to the question (char 1-2-gram TF-IDF,
    cosine), not its own passage and containing none of its answer texts. `rank` skips that many of the
    most similar passages first (the very nearest are the likeliest to answer the question after all).
    other_questions_only: never a passage that the pool pairs with the same question (DuReader gives one
    question several paragraphs, and its other paragraphs often answer it in other words)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    pool = list(pool) if pool is not None else list(examples)
    contexts = sorted({p.context for p in pool})
    titles = {p.context: p.title for p in pool}
    owners: dict[str, set] = {}
    for p in pool:
        owners.setdefault(p.context, set()).add(p.question)
    if not contexts:
        return []
    vec = TfidfVectorizer(analyzer="char", ngram_range=(1, 2), sublinear_tf=True, min_df=1)
    P = vec.fit_transform(contexts)  # (n_passages, vocab), rows L2-normalised
    queries = [ex for ex in examples if not ex.is_impossible and ex.answers]
    if not queries:
        return []
    Q = vec.transform([ex.question for ex in queries])  # (n_questions, vocab)
    out = []
    rng = np.random.default_rng(seed)
    for i in range(0, len(queries), 256):  # blocks keep the dense similarity matrix small
        sims = (Q[i:i + 256] @ P.T).toarray()  # (block, n_passages)
        for ex, row in zip(queries[i:i + 256], sims):
            taken, skipped = 0, 0
            for j in np.argsort(-row + rng.uniform(0, 1e-9, row.shape)):  # tiny jitter: deterministic ties
                c = contexts[j]
                if c == ex.context or any(t and t in c for t in ex.answer_texts):
                    continue
                if other_questions_only and ex.question in owners[c]:
                    continue
                if skipped < rank:
                    skipped += 1
                    continue
                out.append(dataclasses.replace(ex, qid=f"{ex.qid}:sim{taken}", context=c, title=titles[c],
                                               answers=[], is_impossible=True))
                taken += 1
                if taken >= per_question:
                    break
    return out


def answer_sentence_example(ex: MRCExample, rng=None, p_next: float = 0.0) -> Optional[MRCExample]:
    """`ex` with its passage cut to the sentence(s) holding its first answer (and, with probability p_next,
    the sentence after them; rng: a random.Random or numpy Generator), the answer offsets moved; None
    without an answer or when the cut is the whole passage already."""
    if ex.is_impossible or not ex.answers:
        return None
    ans = ex.answers[0]
    spans = sentences(ex.context)
    inside = [i for i, (a, b) in enumerate(spans) if a < ans.end and ans.start < b]
    if not inside:
        return None
    lo, hi = inside[0], inside[-1]
    if rng is not None and p_next > 0 and hi + 1 < len(spans) and rng.random() < p_next:
        hi += 1
    start, end = spans[lo][0], spans[hi][1]
    while start < ans.start and ex.context[start].isspace():  # a sentence after a line break
        start += 1
    if start == 0 and end >= len(ex.context.rstrip()):
        return None
    answers = [MRCAnswer(a.text, a.start - start) for a in ex.answers if a.start >= start and a.end <= end]
    return dataclasses.replace(ex, qid=f"{ex.qid}:sent", context=ex.context[start:end], answers=answers)


# A defining sentence, as encyclopaedia and search snippets open: "ENTITY（aside），简称…，是PREDICATE，…". The
# entity opens its sentence; asides in brackets and 简称/又称-type clauses may stand between it and 是.
_DEFINITION = re.compile(
    r"(?:^|(?<=[。！？\n]))(?P<e>[^，。；！？、：:（()）《》“”\"'\s是的]{2,12})"
    r"(?:[（(][^）)]{0,60}[）)])?"
    r"(?:，(?:简称|又称|别称|旧称|古称|原名|全称|俗称|又名|英文名|英语)[^，。；是]{1,30})*"
    r"，?是(?P<p>[^，。；！？]{4,24}?)(?=[，。；])")
# openers that are no entity (adverbs, time words, pronouns), as in "另外，…是…"
_NOT_ENTITY = _BAD_STEM_START + ("首先", "今天", "目前", "现在", "其实", "总之", "通常", "据说", "您好", "这个", "那个",
                                 "他们", "我们", "你们", "它们", "牠", "此", "该")
# ... and entities that hold a verb or a clause, not a name ("西里伯斯鹿豚起初被认为", "通过白荡闸与长江连通")
_CLAUSE_CHARS = re.compile(r"[被在与能把将归|｜/]|认为|通过|主要|真名|本身|也就")
_PLACE = ("首都", "省会", "城市", "国家", "地区", "城", "县", "市", "省", "州", "岛", "群岛", "山", "山峰", "河", "河流",
          "湖", "街道", "道路", "车站", "站", "机场", "港", "港口", "地名", "村", "镇", "区", "乡")
_PERSON = ("人", "家", "者", "员", "手", "师", "帝", "王", "长", "官", "执行官", "主席", "子", "女", "妻", "夫", "母",
           "父", "作者", "人物", "演员", "歌手", "导演", "将领", "皇帝", "总统", "首相", "院士", "教授")


def definition_question_examples(ex: MRCExample, max_per_passage: int = 2) -> list[MRCExample]:
    """Answerable examples made from the defining sentences of `ex`'s passage ("北京，简称“京”，是中华人民共和国
    的首都，…"): the question asks for the predicate ("中华人民共和国的首都是哪里？") and the answer is the entity
    that opens the sentence. Only predicates holding 的 or 之一 (a relation that names its subject: "瑞士中部的
    一座山峰"), not "是干燥的"-type adjectives. The wh-word follows the predicate's head noun: 哪里 (place), 谁
    (person), else 什么. Why: real passages open with the answer ("北京是…") far more often than the
    CMRC2018 / DuReader-robust questions ask about it, and a reader that never sees it doubts such answers.
    At most `max_per_passage` per passage (the first ones); [] for none."""
    out = []
    for m in _DEFINITION.finditer(ex.context):
        ent, pred = m.group("e"), m.group("p").strip()
        if (ent.startswith(_NOT_ENTITY) or ent.endswith(_BAD_STEM_END + ("曾", "并不", "仍", "亦"))
                or not ("的" in pred or pred.endswith("之一")) or pred.endswith("的")
                or pred.startswith(("一", "由", "在", "指", "以", "从", "对", "为", "被", "把", "通过"))
                or _CLAUSE_CHARS.search(ent) or ent in pred):
            continue
        head = pred[:-2] if pred.endswith("之一") else pred
        wh = "哪里" if head.endswith(_PLACE) else "谁" if head.endswith(_PERSON) else "什么"
        out.append(dataclasses.replace(ex, qid=f"{ex.qid}:def{len(out)}", question=f"{pred}是{wh}？",
                                       answers=[MRCAnswer(ent, m.start("e"))], is_impossible=False))
        if len(out) >= max_per_passage:
            break
    return out


# jieba's part-of-speech flags that name something, by kind; a replacement keeps the kind, so a person's name
# is replaced by a person's name and a university by an organisation
_NAME_KINDS = {"nr": "person", "nrt": "person", "nrfg": "person", "ns": "place", "nt": "organisation",
               "nz": "name"}


def question_names(question: str) -> list[tuple[str, str]]:
    """(word, kind) of the names in `question` by jieba's part-of-speech tags ("北京大学创建于哪一年？" ->
    [("北京大学", "organisation")]). Plain nouns are left out: swapping 常住人口 for 手续费 makes nonsense,
    not a question about something else."""
    import logging

    import jieba
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)
    out = []
    for w in jieba.posseg.cut(question):
        kind = _NAME_KINDS.get(w.flag)
        if kind and len(w.word) >= 2 and not w.word.isascii():
            out.append((w.word, kind))
    return out


def name_pool(examples: Sequence[MRCExample]) -> dict[str, list[str]]:
    """kind -> the distinct names the examples' questions hold (sorted, so a seeded draw repeats)."""
    pool: dict[str, set] = {}
    for ex in examples:
        for word, kind in question_names(ex.question):
            pool.setdefault(kind, set()).add(word)
    return {k: sorted(v) for k, v in pool.items()}


def _char_share(text: str, other: str) -> float:
    """Share of text's characters that occur in other."""
    return sum(c in other for c in text) / len(text) if text else 0.0


def entity_swapped_negative(ex: MRCExample, pool: dict[str, list[str]], rng,
                            tries: int = 20, hard: bool = False) -> Optional[MRCExample]:
    """`ex` with the topic of its QUESTION replaced by another name of the same kind, the passage kept: an
    unanswerable example, since the passage now answers the question for something else ("北京大学创建于
    哪一年？" against a passage on 清华大学). The topic is the question's longest name that the passage contains
    and no answer contains; the new name (drawn by rng, a random.Random; the same length when the pool has
    one) occurs nowhere in the passage, the title or the question. Why: the checklist's unanswerable
    questions change one entity of a question the passage would answer, and a reader trained only on
    other passages as negatives keeps answering them (P 0.99 for the example above). None when the question
    has no such topic or no replacement is found.

    hard: the new name is drawn among those written mostly (at least half their characters) with the
    passage's own characters, as 北京大学 is against a passage on 清华大学 that says 位于北京: a reader that
    matches the question's characters one by one finds them all and answers. Names that share their first
    two characters with the topic (北京 / 北京市) are left out, since they often name the same thing. When no
    name qualifies, the draw is the plain one."""
    if ex.is_impossible or not ex.answers:
        return None
    topics = [(w, k) for w, k in question_names(ex.question)
              if w in ex.context and not any(w in a.text for a in ex.answers)]
    if not topics:
        return None
    word, kind = max(topics, key=lambda t: len(t[0]))
    names = pool.get(kind, [])
    seen = ex.context + (ex.title or "") + ex.question
    if hard:
        close = [n for n in names if n not in seen and word not in n and n not in word and n[:2] != word[:2]
                 and _char_share(n, ex.context) >= 0.5]
        if close:
            new = close[rng.randrange(len(close))]
            return dataclasses.replace(ex, qid=f"{ex.qid}:ent", question=ex.question.replace(word, new),
                                       answers=[], is_impossible=True)
    same_len = [n for n in names if len(n) == len(word)]
    cands = same_len if len(same_len) > 1 else names
    for _ in range(min(tries, len(cands))):
        new = cands[rng.randrange(len(cands))]
        if new in seen or word in new or new in word:
            continue
        return dataclasses.replace(ex, qid=f"{ex.qid}:ent", question=ex.question.replace(word, new), answers=[],
                                   is_impossible=True)
    return None
