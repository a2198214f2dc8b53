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
