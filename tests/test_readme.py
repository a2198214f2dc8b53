"""The README's Python tour runs as written (with its placeholder path pointed at a tiny checkpoint)."""
import os
import re

from .conftest import ROOT


def test_readme_python_tour_runs(tmp_path, zh_vocab, tiny_cfg):
    import bertfam

    tok = bertfam.Tokenizer.from_vocab(zh_vocab)
    bertfam.build_model(tiny_cfg.replace(vocab_size=tok.vocab_size), seed=0).save_pretrained(str(tmp_path / "m"),
                                                                                             tokenizer=tok)
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has no python example"
    code = blocks[0].replace("path/to/model_dir", str(tmp_path / "m")).replace('"out/clf"', repr(str(tmp_path / "clf")))
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)
    assert (tmp_path / "clf" / "model.safetensors").exists()


def _read(name: str) -> str:
    return open(os.path.join(ROOT, name), encoding="utf-8").read()


def test_readme_run_file_example_is_a_valid_finetune_run_file(tmp_path):
    from bertfam.cli import build_parser

    text = _read("README.md")
    example = re.search(r"```json\n(.*?)```", text[text.index("Every training command"):], re.S).group(1)
    (tmp_path / "run.json").write_text(example)
    args = build_parser().parse_args(["finetune", "--config", str(tmp_path / "run.json"), "--out", "o"])
    args.func.merge(args)  # unknown keys, bad values or a missing required option would raise here
    assert args.grad_accum == 4 and args.save_optimizer_state is False


def test_kbert_show_example_injects_as_documented(tmp_path, capsys, zh_vocab):
    """The docs' K-BERT example, on the two triples of K-BERT's HowNet.spo (MIT) it uses, prints the tree shown
    in docs/kbert.md."""
    import shutil

    from bertfam.cli import main

    text = re.search(r'bertfam kbert show .*? "(.+?)"', _read("README.md")).group(1)
    doc = _read("docs/kbert.md")
    shown = re.search(r"\$ bertfam kbert show [^\n]*\"" + text + r"\"\n(.*?)```", doc, re.S).group(1)
    (tmp_path / "hownet.spo").write_text("服务员\t义原\t人\n大使馆\t义原\t机构\n", encoding="utf-8")
    os.makedirs(tmp_path / "tok")
    shutil.copy(zh_vocab, tmp_path / "tok" / "vocab.txt")
    assert main(["kbert", "show", "--kg", str(tmp_path / "hownet.spo"), "--tokenizer", str(tmp_path / "tok"),
                 text]) == 0
    out = capsys.readouterr().out
    assert "'injected_entities': 2" in out
    assert out.split("\n", 1)[1] == shown.split("\n", 1)[1]  # all but the graph's size line


def test_readme_pipeline_snippet_runs(tmp_path):
    """The README's pipeline block as written, its run directories pointed at tiny random models of the same
    heads (a fresh clone has none of them); every call's result has the shape its comment shows."""
    from .serving_helpers import make_tiny_models

    d = make_tiny_models(str(tmp_path))
    blocks = re.findall(r"```python\n(.*?)```", _read("README.md"), re.S)
    [code] = [b for b in blocks if b.startswith("from bertfam import pipeline")]
    for path, tiny in (("runs/tnews", d["classification"]), ("runs/cluener", d["token"]), ("runs/mlm", d["mlm"]),
                       ("runs/any", d["mlm"]), ("models/mrc-zh-e5small-l12", d["span"])):
        assert f'"{path}"' in code, path
        code = code.replace(f'"{path}"', repr(tiny))
    # each line's value kept, to check the shapes the comments promise
    lines = code.strip().splitlines()
    ns: dict = {}
    values = []
    for line in lines:
        stmt = line.split("  #")[0].rstrip()
        if not stmt:
            continue
        if stmt.startswith(("from ", "import ")) or "=" in stmt.split("(")[0]:
            exec(compile(stmt, "README.md", "exec"), ns)
        else:
            values.append(eval(compile(stmt, "README.md", "eval"), ns))
    batch, one, top3, pair, ents, fills, answer, answers3, vecs = values
    assert len(batch) == 2 and {"label", "score"} <= set(batch[0])
    assert isinstance(one, list) and len(one) == 1 and {"label", "score"} <= set(one[0])
    assert len(top3) == 2 and all(set(r) == {"label", "score"} for r in top3)  # the tiny model has 2 labels
    assert isinstance(pair, dict) and "label" in pair
    assert all(set(e) == {"entity_group", "score", "word", "start", "end"} for e in ents)
    assert len(fills) == 3 and all(set(c) == {"score", "token", "token_str", "sequence"} for c in fills)
    assert set(answer) == {"score", "start", "end", "answer", "answerable"}
    assert isinstance(answers3, list) and 1 <= len(answers3) <= 3 and answers3[0] == answer
    assert len(vecs) == 1 and set(vecs[0]) == {"vector", "truncated"}
