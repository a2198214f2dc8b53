"""Files bertfam writes (atomically, through a temporary file) get the umask's mode, like any other file."""
import os
import stat

import pytest

from bertfam.utils import atomic_path, atomic_write_text, current_umask


@pytest.fixture(params=[(0o022, 0o644), (0o077, 0o600)], ids=["umask022", "umask077"])
def umask_mode(request):
    mask, mode = request.param
    old = os.umask(mask)
    try:
        yield mask, mode
    finally:
        os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _tiny_model():
    from bertfam import build_model, preset
    from bertfam.tokenization.tokenizer import Tokenizer, bert_wordpiece

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "weather", "is", "nice", "."]
    tok = Tokenizer(bert_wordpiece({w: i for i, w in enumerate(words)}))
    cfg = preset("bert-tiny", vocab_size=len(words), num_hidden_layers=1, max_position_embeddings=16)
    return build_model(cfg, seed=0), tok


def test_current_umask_reads_without_changing(umask_mode):
    mask, _ = umask_mode
    assert current_umask() == mask
    assert current_umask() == mask  # reading twice: the first read restored it


def test_current_umask_without_proc(monkeypatch, umask_mode):
    import bertfam.utils as utils

    def no_proc(*a, **k):
        raise OSError("no /proc")

    monkeypatch.setattr(utils, "open", no_proc, raising=False)  # the module's open() shadows the builtin
    mask, _ = umask_mode
    assert utils.current_umask() == mask and os.umask(mask) == mask


def test_atomic_write_text_mode(tmp_path, umask_mode):
    _, mode = umask_mode
    p = tmp_path / "out.json"
    atomic_write_text(str(p), "{}\n")
    assert p.read_text() == "{}\n" and _mode(p) == mode
    atomic_write_text(str(p), "[]\n")  # replacing an existing file
    assert p.read_text() == "[]\n" and _mode(p) == mode


def test_writer_that_recreates_the_file_gets_the_umask_mode(tmp_path, umask_mode):
    _, mode = umask_mode
    p = tmp_path / "x.bin"
    with atomic_path(str(p)) as tmp:
        os.unlink(tmp)
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600))
    assert _mode(p) == mode


def test_failed_write_leaves_nothing(tmp_path):
    p = tmp_path / "x.txt"
    with pytest.raises(RuntimeError):
        with atomic_path(str(p)) as tmp:
            open(tmp, "w").close()
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_saved_model_directory_modes(tmp_path, umask_mode):
    _, mode = umask_mode
    model, tok = _tiny_model()
    out = tmp_path / "m"
    model.save_pretrained(str(out), tokenizer=tok)
    names = sorted(os.listdir(out))
    assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt"} <= set(names), names
    assert {n: _mode(out / n) for n in names} == {n: mode for n in names}
