"""Extractive reading comprehension (DuReader / CMRC / SQuAD 2.0), one module per job:

- `predictor`: `MRCPredictor` (windows -> forward -> decode -> the no-answer rule), `settings_of` (the
  settings a predictor of some models runs with, a few fields overridden), `window_logits` (a batch's logits
  -> the input of `decode`);
- `decoding`: `decode` / `decode_with` (n-best spans over a question's windows), `answered` (the no-answer rule);
- `results`: `RawScores` (one question's decoded spans and no-answer signals), `MRCPrediction` (a predictor's
  answer), `SpanCandidate` (one n-best span); `to_dict` is each one's JSON shape;
- `ensemble`: `VotingEnsemble`, `load_predictor`, `predictor_from_models`;
- `thresholds`: `tune_thresholds`, `tune_on_raw`, `save_thresholds`;
- `training`: `train_mrc`, `load_span_model`;
- `scoring`: `predict_examples`, `score_examples`.

The settings they share (windows, decoding, thresholds) are the model's `head.mrc` (`config.MRCSettings`,
where each default is defined). Every public name is importable from `bertfam.tasks.mrc` itself.
"""
from .decoding import NO_ANSWER, answered, decode, decode_with  # noqa: F401
from .ensemble import VotingEnsemble, load_predictor, predictor_from_models  # noqa: F401
from .predictor import MRCPredictor, same_tokenizer, settings_of, window_logits  # noqa: F401
from .results import MRCPrediction, RawScores, SpanCandidate  # noqa: F401
from .scoring import predict_examples, score_examples  # noqa: F401
from .thresholds import save_thresholds, tune_on_raw, tune_thresholds  # noqa: F401
from .training import load_span_model, train_mrc  # noqa: F401
