"""Synthetic-but-structured multimodal data, for demos, tests and the issue's evidence runs.

No detector, video model or recorded speech is at hand offline, so the non-text input is generated
with a known structure that the text refers to:

- image: each object class has a Gaussian cluster in feature space; an image is 2 object regions + 1
  background region (with boxes); the caption names the two objects. Masked object words and the
  caption/image match can only be solved by looking at the regions.
- video: each action has a cluster; a video is 2-3 actions of 2-3 clips each; the caption names the
  actions in order ("first chop then stir").
- speech: `espeak-ng` speaks "what color is the dog" with several voices and speeds; the passage lists
  three animals with colours; the answer is the colour of the animal asked about. The text alone
  cannot tell which of the three colours is asked for. `text` holds the transcript (for speech
  pre-training: masked LM of the transcript conditioned on the audio); the QA path never reads it.

Run `python -m bertfam.multimodal.synthetic {image,video,speech,vocab} OUT [--n N]`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess

import numpy as np

from ..errors import ConfigError
from ..utils import atomic_write_text

OBJECTS = ["dog", "cat", "car", "tree", "ball", "cup", "bird", "boat"]
ACTIONS = ["chop", "stir", "pour", "fry", "wash", "peel", "mix", "bake", "cut", "boil"]
ANIMALS = ["dog", "cat", "bird", "fish", "horse", "cow"]
COLORS = ["red", "blue", "green", "black", "white", "yellow"]
VOICES = [("en-us", 150), ("en-us", 175), ("en", 160), ("en+f3", 150), ("en+m3", 170), ("en-us+f2", 185)]
FILLER = ["a", "photo", "of", "and", "first", "then", "the", "is", "what", "color", "."]


def vocab_words() -> list[str]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return specials + sorted(set(FILLER + OBJECTS + ACTIONS + ANIMALS + COLORS))


def write_vocab(path: str) -> str:
    atomic_write_text(path, "".join(w + "\n" for w in vocab_words()))
    return path


def _manifest(out: str, rows: list[dict]) -> str:
    p = os.path.join(out, "manifest.jsonl")
    atomic_write_text(p, "".join(json.dumps(r) + "\n" for r in rows))
    return p


def make_image_set(out: str, n: int = 400, dim: int = 32, seed: int = 0, noise: float = 0.6) -> str:
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 1, (len(OBJECTS), dim)).astype(np.float32)
    os.makedirs(out, exist_ok=True)
    rows = []
    for i in range(n):
        objs = rng.choice(len(OBJECTS), 2, replace=False)
        feats = [centers[c] + noise * rng.normal(0, 1, dim) for c in objs] + [rng.normal(0, 1, dim)]  # + background
        order = rng.permutation(3)  # region order carries no information
        xy = rng.uniform(0, 0.5, (3, 2))
        wh = rng.uniform(0.1, 0.5, (3, 2))
        boxes = np.concatenate([xy, xy + wh, (wh[:, :1] * wh[:, 1:])], axis=1)  # x1 y1 x2 y2 area
        rid = f"img-{i:04d}"
        np.savez(os.path.join(out, rid + ".npz"), features=np.asarray(feats, np.float32)[order],
                 boxes=boxes.astype(np.float32), id=np.array(rid))
        rows.append({"id": rid, "text": f"a photo of a {OBJECTS[objs[0]]} and a {OBJECTS[objs[1]]}",
                     "features": rid + ".npz"})
    return _manifest(out, rows)


def make_video_set(out: str, n: int = 400, dim: int = 24, seed: int = 0, noise: float = 0.5) -> str:
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 1, (len(ACTIONS), dim)).astype(np.float32)
    os.makedirs(out, exist_ok=True)
    rows = []
    for i in range(n):
        acts = rng.choice(len(ACTIONS), int(rng.integers(2, 4)), replace=False)
        clips = [centers[a] + noise * rng.normal(0, 1, dim) for a in acts for _ in range(int(rng.integers(2, 4)))]
        rid = f"vid-{i:04d}"
        np.save(os.path.join(out, rid + ".npy"), np.asarray(clips, np.float32))
        words = [ACTIONS[a] for a in acts]
        rows.append({"id": rid, "text": "first " + " then ".join(words), "features": rid + ".npy"})
    return _manifest(out, rows)


def espeak(text: str, path: str, voice: str = "en-us", speed: int = 160) -> None:
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise ConfigError("espeak-ng is not installed (Debian: apt-get install espeak-ng)")
    subprocess.run([exe, "-v", voice, "-s", str(speed), "-w", path, text], check=True, capture_output=True)


def make_speech_set(out: str, n: int = 600, seed: int = 0) -> str:
    """Spoken questions over three-animal passages; WAVs are shared between records (6 animals x 6 voices)."""
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(out, "wav"), exist_ok=True)
    for a in ANIMALS:
        for v, (voice, speed) in enumerate(VOICES):
            p = os.path.join(out, "wav", f"{a}-{v}.wav")
            if not os.path.isfile(p):
                espeak(f"what color is the {a}", p, voice, speed)
    rows = []
    for i in range(n):
        animals = rng.choice(len(ANIMALS), 3, replace=False)
        colors = rng.choice(len(COLORS), 3, replace=False)
        passage = " ".join(f"the {ANIMALS[a]} is {COLORS[c]}." for a, c in zip(animals, colors))
        k = int(rng.integers(3))
        ans = COLORS[colors[k]]
        start = passage.index(f"the {ANIMALS[animals[k]]} is ") + len(f"the {ANIMALS[animals[k]]} is ")
        q = f"what color is the {ANIMALS[animals[k]]}"  # "text": the transcript (speech pre-training only)
        rows.append({"id": f"q-{i:04d}", "passage": passage, "text": q,
                     "answer": {"text": ans, "start": start},
                     "audio": f"wav/{ANIMALS[animals[k]]}-{int(rng.integers(len(VOICES)))}.wav"})
    return _manifest(out, rows)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m bertfam.multimodal.synthetic")
    p.add_argument("kind", choices=["image", "video", "speech", "vocab"])
    p.add_argument("out")
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.kind == "vocab":
        print(write_vocab(a.out))
        return
    fn = {"image": make_image_set, "video": make_video_set, "speech": make_speech_set}[a.kind]
    kw = {"n": a.n} if a.n else {}
    print(fn(a.out, seed=a.seed, **kw))


if __name__ == "__main__":
    main()
