"""The benchmarks' inputs: model presets, cases, random token batches, MLM batches and the FLOP count of
the work they hold. Every engine of a case is fed the very same batches (seeded numpy draws)."""
from __future__ import annotations

MODELS = {"bert-base": "bert-base-chinese", "bert-mini": "bert-mini-chinese",
          "bert-tiny": "bert-tiny-chinese"}  # bert-tiny: the smoke test only
# case: (kind, batch size, min length, max length, batches per repetition); quick mode halves the work
CASES = {
    "infer 16-128": ("infer", 8, 16, 128, 2),
    "infer full 128": ("infer", 8, 128, 128, 1),
    "train MLM 16-128": ("train", 8, 16, 128, 1),
    "infer 16-512": ("infer", 8, 16, 512, 1),
    "infer full 512": ("infer", 2, 512, 512, 1),
}


def bertfam_model(name: str, seed: int = 0):
    """The benchmarks' random-weight bertfam model of preset `name` (a MODELS key): a TaskModel with an MLM
    head, in eval mode (the `prepare` job saves it and converts it for the other engines)."""
    import bertfam

    cfg = bertfam.preset(MODELS[name], head=bertfam.HeadConfig(task="mlm"))
    return bertfam.build_model(cfg, seed=seed).eval()


def batch_size(case: str, scale: float) -> int:
    """The case's batch size times `scale`; at least 2 where lengths vary (so there is padding), else 1."""
    _, B, lo, hi, _ = CASES[case]
    return max(1 if lo == hi else 2, round(B * scale))


def make_batches(case: str, vocab: int, seed: int = 0, scale: float = 1.0) -> list[dict]:
    """The case's batches, padded to their longest sequence (right padding, as tokenizers do)."""
    import numpy as np

    _, _, lo, hi, n = CASES[case]
    B = batch_size(case, scale)
    rng = np.random.default_rng(seed)
    return [random_batch(rng, B, lo, hi, vocab) for _ in range(n)]


def random_batch(rng, B: int, lo: int, hi: int, vocab: int) -> dict:
    """B sequences [CLS] random ids [SEP], lengths uniform in lo..hi, right-padded to the longest."""
    import numpy as np
    import torch

    lengths = rng.integers(lo, hi + 1, size=B)
    T = int(lengths.max())
    mask = torch.from_numpy((np.arange(T)[None] < lengths[:, None]).astype(np.int64))
    ids = torch.from_numpy(rng.integers(106, vocab, size=(B, T))) * mask  # 106+: no special ids
    ids[:, 0] = 101  # [CLS]
    ids[torch.arange(B), torch.from_numpy(lengths - 1)] = 102  # [SEP]
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def mlm_batches(batches: list[dict], vocab: int, seed: int = 0) -> list[dict]:
    """Re-collate with bertfam's PretrainCollator: 15 % token masking, labels and masked_positions."""
    import numpy as np
    import torch

    from bertfam.objectives.collator import PretrainCollator
    from bertfam.objectives.masking import WORD_BEGIN, Masker, MaskingConfig

    masker = Masker(MaskingConfig(strategy="token", rate=0.15), vocab, mask_id=103, special_ids=[0, 100, 101, 102, 103])
    coll = PretrainCollator(masker, pad_id=0, pair=False, masked_positions=True)
    torch.manual_seed(seed)
    out = []
    for b in batches:
        exs = []
        for ids, m in zip(b["input_ids"], b["attention_mask"]):
            real = ids[m.bool()].numpy()
            exs.append({"input_ids": real, "flags": np.full(len(real), WORD_BEGIN, np.uint8)})
        out.append(coll(exs))
    return out


def real_tokens(batches: list[dict]) -> int:
    return int(sum(int(b["attention_mask"].sum()) for b in batches))


def model_flops(cfg, batches: list[dict], train: bool) -> float:
    """Useful FLOPs of the encoder on the real tokens (no padding), per pass over `batches`: 2 x linear MACs +
    attention, x3 for training (forward + backward); the MLM head is not counted."""
    H, I, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    total = 0.0
    for b in batches:
        for n in b["attention_mask"].sum(1).tolist():
            total += L * (2 * n * (4 * H * H + 2 * H * I) + 4 * n * n * H)
    return total * (3 if train else 1)
