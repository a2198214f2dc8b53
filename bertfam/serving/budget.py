"""Token counts of request items: what each item costs the model, counted after tokenization.

Characters are a poor measure of work: `"a,"` is two tokens per two characters, a Chinese character one,
and an MRC passage longer than the window is read in overlapping windows, each carrying the question
again. The counts here are the tokens the model will actually be fed: MRC and NER every window (question,
title and special tokens included), classification, embed and fill-mask the input cut to the window. The
service refuses a request over `--max-request-tokens` and packs batches up to `--max-batch-tokens`.
"""
from __future__ import annotations

from ..data.mrc_windows import build_windows
from ..tasks.mrc.predictor import reader_items, titled_twice
from ..tasks.pipelines import ClassificationPipeline, MRCPipeline, NERPipeline, Pipeline


def token_counts(predictor: Pipeline, items: list[dict]) -> list[int]:
    """Tokens the model reads for each item (one int per item, in order)."""
    tok, window = predictor.tok, predictor.window
    if isinstance(predictor, MRCPipeline):
        s = predictor.inner.settings  # the windows the pipeline's MRCPredictor reads
        items = reader_items(s, items)  # keyword queries without their title, when the settings say so
        counts = [0] * len(items)
        for w in build_windows(tok, items, s.max_length, s.doc_stride, s.max_query_length, s.use_title):
            counts[w.example_index] += len(w.input_ids)
        twice = titled_twice(s, items)  # title_ensemble: these are read once more, without their title
        for w in build_windows(tok, [items[i] for i in twice], s.max_length, s.doc_stride, s.max_query_length, False):
            counts[twice[w.example_index]] += len(w.input_ids)
        return counts
    if isinstance(predictor, NERPipeline):  # the same windows NERPipeline.predict_batch makes
        enc = tok([it["text"] for it in items], max_length=window, stride=window // 4,
                  return_overflowing_tokens=True, padding=False, return_tensors=None)
        counts = [0] * len(items)
        for e, sample in zip(enc.encodings, enc["overflow_to_sample_mapping"]):
            counts[sample] += len(e.ids)
        return counts
    pairs = None
    if isinstance(predictor, ClassificationPipeline):
        # one call for all: an absent pair counts as an empty one (same special tokens bar one [SEP])
        pairs = [it.get("text_pair") or "" for it in items]
        if not any(pairs):
            pairs = None
    enc = tok([it["text"] for it in items], pairs, max_length=window, padding=False, return_tensors=None)
    return [len(e.ids) for e in enc.encodings]
