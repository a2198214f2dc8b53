"""The typed results of extractive MRC, one question each: `SpanCandidate` (one n-best span), `RawScores` (what
`decoding.decode` finds: the n-best spans and the no-answer signals, before any threshold) and `MRCPrediction`
(what `MRCPredictor` answers, after the no-answer rule).

`to_dict` gives the JSON shape each has always had (the HTTP API, `mrc predict`'s n-best file, the raw scores
that cross-validation keeps on disk); `RawScores.from_dict` reads that shape back, so kept files still load."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from ...errors import DataError


@dataclass(frozen=True)
class SpanCandidate:
    """One candidate answer of a passage."""

    text: str
    start: int  # character offsets into the passage: text == passage[start:end]
    end: int
    score: float  # start logit + end logit (less the question-overlap penalty)
    prob: float  # softmax of the scores over the question's n-best

    def to_dict(self) -> dict:
        return {"text": self.text, "start": self.start, "end": self.end, "score": self.score, "prob": self.prob}

    @classmethod
    def from_dict(cls, d: Mapping) -> "SpanCandidate":
        return cls(d["text"], d["start"], d["end"], d["score"], d["prob"])


@dataclass(frozen=True)
class RawScores:
    """One question's decoded windows: what the no-answer rule (`decoding.answered`) and threshold tuning read."""

    nbest: tuple[SpanCandidate, ...]  # best first, one per answer text
    null_diff: float  # best span score - min null score over the windows; -inf without a span
    p_answerable: Optional[float]  # max over windows of the classifier's P (the fused model's, once applied)
    relevance: Optional[float] = None  # the verifier's question-passage score (None: no verifier)
    p_reader: Optional[float] = None  # the reader's own P(answerable), kept when a fused model replaced it
    expected_f1: Optional[float] = None  # the answer's expected F1 against the n-best (decoding.expected_f1)

    @property
    def best(self) -> Optional[SpanCandidate]:
        return self.nbest[0] if self.nbest else None

    def to_dict(self) -> dict:
        d = {"nbest": [c.to_dict() for c in self.nbest], "null_diff": self.null_diff,
             "p_answerable": self.p_answerable, "relevance": self.relevance}
        if self.p_reader is not None:  # only a fused result has it
            d["p_reader"] = self.p_reader
        if self.expected_f1 is not None:  # files kept before it existed lack it
            d["expected_f1"] = self.expected_f1
        return d

    @classmethod
    def from_dict(cls, d: Mapping, where: str = "raw scores") -> "RawScores":
        """The `to_dict` shape (nbest, null_diff, p_answerable; relevance, p_reader, expected_f1 optional) back; one DataError
        line naming `where` for anything else."""
        try:
            return cls(tuple(SpanCandidate.from_dict(c) for c in d["nbest"]), d["null_diff"], d["p_answerable"],
                       d.get("relevance"), d.get("p_reader"), d.get("expected_f1"))
        except (KeyError, TypeError, AttributeError) as e:
            raise DataError(f"{where}: not MRC raw scores (nbest, null_diff, p_answerable): {e!r}") from None


@dataclass(frozen=True)
class MRCPrediction:
    """A predictor's answer to one question. The detail fields (nbest ... p_reader) are filled by
    `predict_batch(details=True)` and None otherwise; `votes` by a VotingEnsemble asked for details."""

    answer: Optional[str]  # None: no answer
    start: Optional[int]  # character offsets of the answer in the passage (None with no answer)
    end: Optional[int]
    score: float  # answered: span probability x P(answerable); declined: the confidence in "no answer"
    answerable: bool
    nbest: Optional[tuple[SpanCandidate, ...]] = None
    null_diff: Optional[float] = None
    p_answerable: Optional[float] = None
    relevance: Optional[float] = None
    p_reader: Optional[float] = None
    votes: Optional[dict] = None  # normalised answer text (or "\0none") -> its summed score

    def to_dict(self) -> dict:
        """{answer, start, end, score, answerable} (+ nbest, null_diff, p_answerable, relevance with details;
        + votes): the JSON shape of the HTTP API and the prediction files. p_reader is not part of it."""
        d = {"answer": self.answer, "start": self.start, "end": self.end, "score": self.score,
             "answerable": self.answerable}
        if self.nbest is not None:
            d.update(nbest=[c.to_dict() for c in self.nbest], null_diff=self.null_diff,
                     p_answerable=self.p_answerable, relevance=self.relevance)
        if self.votes is not None:
            d["votes"] = dict(self.votes)
        return d
