"""The README's shell commands run as written.

Every `bertfam ...` line of the README's bash blocks parses with the real CLI (options exist, values are
in range, run-file merging accepts them). The reading-comprehension and fine-tuning blocks then run end to
end exactly as written, their placeholders (MODEL, dev.json, SST-2/train.tsv, ...) bound to tiny models and
the fixtures under tests/fixtures, in a scratch directory so that their relative `runs/...` paths land there.
Commands that need real data or hours (pre-training 200 steps, distillation, GLUE, serve) are parsed only."""
import json
import os
import re
import shlex

import pytest

from .conftest import FIXTURES, ZH_VOCAB, cli

MRC = os.path.join(FIXTURES, "mrc")
SST2 = os.path.join(FIXTURES, "finetune", "glue", "SST-2")


def readme_commands(section: str = "") -> list[list[str]]:
    """argv (without `bertfam`) of each `bertfam` line in the README's bash blocks (of the section whose
    heading starts with `section`, or all), continuation lines joined, comments and `[optional]` parts
    dropped; lines with a literal `...` (elisions) are left out."""
    from .conftest import ROOT

    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    if section:
        start = text.index("\n## " + section)
        end = text.find("\n## ", start + 1)
        text = text[start:end if end > 0 else None]
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            cmd = line.split("  #")[0].strip()
            if cmd.startswith("bertfam ") and "..." not in cmd:
                out.append(shlex.split(re.sub(r"\s\[[^\]]*\]", "", cmd))[1:])
    return out


def test_every_readme_command_parses():
    from bertfam.cli import build_parser

    commands = readme_commands()
    assert len(commands) >= 25, len(commands)
    seen = set()
    for argv in commands:
        args = build_parser().parse_args(argv)  # an unknown option or bad value exits 2 here
        merge = getattr(args.func, "merge", None)
        if merge:
            merge(args)  # a missing required option or a bad run-file value raises here
        seen.add(argv[0])
    assert {"mrc", "finetune", "pretrain", "distill", "serve", "export", "kbert", "multimodal"} <= seen


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A working directory holding the README's placeholder files, and a tiny model for MODEL."""
    import shutil

    from bertfam import Tokenizer, build_model, preset

    tok = Tokenizer.from_vocab(ZH_VOCAB)
    cfg = preset("bert-tiny", vocab_size=tok.vocab_size, hidden_size=32, num_attention_heads=2,
                 intermediate_size=64, num_hidden_layers=1, max_position_embeddings=512)
    build_model(cfg, seed=0).save_pretrained(str(tmp_path / "MODEL"), tokenizer=tok)
    for name, src in (("cmrc2018_train.json", "cmrc2018_trial_cut.json"), ("robust_train.json",
                      "robust_demo_dev_cut.json"), ("checklist.json", "checklist_demo_cut.json"),
                      ("dev.json", "checklist_demo_cut.json")):
        shutil.copy(os.path.join(MRC, src), tmp_path / name)
    shutil.copytree(SST2, tmp_path / "SST-2")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _bind(argv: list[str], names: dict) -> list[str]:
    return [names.get(a, a) for a in argv]


def test_reading_comprehension_block_runs_as_written(scratch, capsys):
    names = {"Q": "谁是作者？", "P": "张三是这本书的作者。", "T": "书", "A": "runs/mrc", "B": "runs/mrc",
             "C": "runs/mrc"}
    commands = readme_commands("Reading comprehension")
    assert [a[1] for a in commands] == ["train", "predict", "evaluate", "ask", "ensemble", "compare", "predict",
                                        "predict"]
    for argv in commands:
        rc, out, err = cli(capsys, *_bind(argv, names))
        assert rc == 0, (argv, err)
    assert (scratch / "pred.json").is_file() and (scratch / "pred.nbest.json").is_file()
    assert (scratch / "runs" / "cmp" / "compare.png").is_file()
    assert "no answer" not in json.load(open(scratch / "all.json")).values()  # --always-answer
    assert "no answer" not in json.load(open(scratch / "long.json")).values()  # --always-answer --length-bonus 1
    [export] = [a for a in readme_commands("Serving") if a[0] == "export"]
    rc, out, err = cli(capsys, *export)  # bertfam export --onnx runs/mrc mrc.onnx
    assert rc == 0 and (scratch / "mrc.onnx").is_file(), err


def test_fine_tuning_block_runs_as_written(scratch, capsys):
    commands = [a for a in readme_commands("Fine-tuning") if "sst2" in a or "runs/sst2" in a]
    assert [a[0] for a in commands] == ["finetune", "evaluate", "predict"]
    for argv in commands:
        rc, out, err = cli(capsys, *_bind(argv, {"MODEL_DIR": "MODEL"}))
        assert rc == 0, (argv, err)
    assert (scratch / "runs" / "sst2" / "model.safetensors").is_file()
    assert (scratch / "submission" / "SST-2.tsv").is_file()
