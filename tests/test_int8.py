"""Int8 CPU inference (modeling/int8.py): the swap changes modules and numbers but keeps every head's outputs
close to float32 in both layouts; int8 checkpoints round-trip bit for bit, are a quarter of the float size
and refuse mismatched files with one line; `bertfam quantize`, the --int8 flags and `export --onnx --int8`.

Hidden size 256 wherever outputs are compared: smaller random layers saturate the int16 pair sums of the
non-VNNI int8 kernels (modeling/int8.py measures it), which real models (hidden >= 384) do not."""
import copy
import json
import os

import pytest
import torch

import bertfam
from bertfam import HeadConfig
from bertfam.errors import CheckpointError, ConfigError
from bertfam.modeling import int8 as int8_mod
from bertfam.modeling import optimize
from bertfam.modeling.int8 import Int8Embedding, Int8Linear, Int8MLMPredictor, is_int8, quantize_int8
from bertfam.modeling.optimize import optimize_for_inference, reuses_buffers

from .conftest import FIXTURES, cli
from .head_checkpoints import save_head_checkpoints
from .test_varlen import HEADS, _batch

SMALL = dict(vocab_size=300, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=1024,
             max_position_embeddings=64)
# A broken quantizer (wrong scale, a transposed weight, a lost bias) is off by tens of percent or more; int8
# here is off by 0.4-1.7 % (relative Frobenius error of each output) with argmax agreement 0.95-1.00.
RTOL = 0.05
AGREE = 0.9
OUTPUTS = ("last_hidden_state", "pooler_output", "logits", "pair_logits", "start_logits", "end_logits",
           "answerable_logits")


def _cfg(family="bert-base", **head):
    kw = dict(SMALL)
    if family == "albert-base":
        kw.update(embedding_size=128, num_hidden_groups=1)
    if family == "roberta-base":
        kw.update(max_position_embeddings=66)
    return bertfam.preset(family, **kw, head=HeadConfig(**head))


def _compare(a, b, real) -> dict:
    """{field: (relative error, argmax agreement or None, bit-identical)} over the fields both outputs have;
    per-token fields on real tokens only."""
    out = {}
    for name in OUTPUTS:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is None:
            continue
        assert x.shape == y.shape and y.dtype == torch.float32, name
        if x.dim() >= 2 and x.shape[:2] == real.shape:
            x, y = x[real], y[real]
        rel = float((x - y).norm() / x.norm())
        classes = name.endswith("logits") and x.dim() > 1 and x.shape[-1] > 1 and \
            not (name == "logits" and a.start_logits is not None)  # span logits: (start, end), not classes
        agree = float((x.argmax(-1) == y.argmax(-1)).float().mean()) if classes else None
        out[name] = (rel, agree, torch.equal(x, y))
    return out


def _count_scratch(monkeypatch) -> list:
    made = []
    real = optimize.Scratch
    monkeypatch.setattr(optimize, "Scratch", lambda: made.append(1) or real())
    return made


# ---------------------------------------------------------------- accuracy of the swap
@pytest.mark.parametrize("head", HEADS, ids=lambda h: "-".join(str(v) for v in h.values()))
def test_int8_is_close_to_float_for_every_head_and_layout(head, monkeypatch):
    cfg = _cfg(**head)
    plain = bertfam.build_model(cfg, seed=0).eval()
    fast = optimize_for_inference(copy.deepcopy(plain), int8=True)
    assert is_int8(fast) and reuses_buffers(fast)
    kw = _batch(cfg, B=6, T=24, seed=3)
    real = kw["attention_mask"].bool()
    made = _count_scratch(monkeypatch)
    with torch.inference_mode():
        for packing in ("auto", "padded"):
            a, b = plain(**kw, packing=packing), fast(**kw, packing=packing)
            diffs = _compare(a, b, real)
            for name, (rel, agree, same) in diffs.items():
                assert rel < RTOL, (packing, name, rel)
                assert agree is None or agree >= AGREE, (packing, name, agree)
            assert not any(same for _, _, same in diffs.values()), "int8 outputs equal float32: nothing quantized"
    assert len(made) == 2, "the buffer-reusing layers did not run around the int8 projections"


@pytest.mark.parametrize("family", ["albert-base", "roberta-base"])
def test_int8_other_families_mlm(family):
    """ALBERT: shared layers, factorized embeddings (the tied decoder is E-wide); RoBERTa: padding positions."""
    cfg = _cfg(family, task="mlm")
    plain = bertfam.build_model(cfg, seed=1).eval()
    fast = quantize_int8(copy.deepcopy(plain))
    kw = _batch(cfg, B=4, T=20, seed=2)
    with torch.inference_mode():
        for packing in ("auto", "padded"):
            diffs = _compare(plain(**kw, packing=packing), fast(**kw, packing=packing), kw["attention_mask"].bool())
            assert all(rel < RTOL and (agree is None or agree >= AGREE) for rel, agree, _ in diffs.values()), diffs


def test_swap_changes_modules_buffers_and_config_not_a_no_op():
    cfg = _cfg(task="mlm")
    plain = bertfam.build_model(cfg, seed=0).eval()
    model = optimize_for_inference(copy.deepcopy(plain), int8=True)
    layer = model.backbone.encoder.layers[0]
    for lin in (layer.attn.qkv, layer.attn.out, layer.ffn_in, layer.ffn_out):
        assert type(lin) is Int8Linear and lin.weight_int8.dtype == torch.int8
        assert lin.weight_scale.shape == (lin.out_features,) and lin.weight_scale.dtype == torch.float32
    word = model.backbone.embeddings.word
    assert type(word) is Int8Embedding and type(model.mlm) is Int8MLMPredictor and model.mlm.word[0] is word
    assert model.head.mlm is model.mlm and model.head.parts["mlm"] is model.mlm  # the head runs the new module
    assert type(model.backbone.pooler) is torch.nn.Linear
    assert type(model.backbone.embeddings.position) is torch.nn.Embedding
    sd = model.state_dict()
    assert sd["backbone.encoder.layers.0.ffn_in.weight_int8"].dtype == torch.int8
    assert "backbone.encoder.layers.0.ffn_in.weight" not in sd and "mlm.decoder.weight_int8" not in sd  # tied: once
    # per output channel: every row uses its full int8 range (max |code| 127, zero point 0)
    codes = layer.ffn_in.weight_int8.abs().amax(1)
    assert bool((codes == 127).all())
    w = plain.backbone.encoder.layers[0].ffn_in.weight
    assert bool(((layer.ffn_in.dequantize() - w).abs() <= layer.ffn_in.weight_scale[:, None] / 2 + 1e-7).all())
    assert model.config.quantization.modules == ["attn.qkv", "attn.out", "ffn_in", "ffn_out", "embeddings.word"]
    assert plain.config.quantization is None  # the float model's config is not touched
    assert model.num_parameters() == plain.num_parameters()  # int8 weights count as the parameters they replace
    # idempotent: a second swap keeps the int8 modules (and buffer reuse)
    before = [id(m) for m in model.modules()]
    optimize_for_inference(model, int8=True)
    assert [id(m) for m in model.modules()] == before


def test_subset_of_modules():
    model = quantize_int8(bertfam.build_model(_cfg(task="classification", num_labels=2), seed=0), ["ffn_out"])
    layer = model.backbone.encoder.layers[0]
    assert type(layer.ffn_out) is Int8Linear and type(layer.ffn_in) is torch.nn.Linear
    assert type(model.backbone.embeddings.word) is torch.nn.Embedding
    assert model.config.quantization.modules == ["ffn_out"]
    for bad in (["ffn"], []):
        with pytest.raises(ConfigError, match="unknown module.*known: attn.qkv"):
            quantize_int8(model, bad)


def test_inference_only_and_no_way_back(tiny_cfg):
    cfg = tiny_cfg.replace(head=HeadConfig(task="token", num_labels=3))
    model = optimize_for_inference(bertfam.build_model(cfg, seed=0), int8=True)
    kw = _batch(cfg, B=3, T=9)
    out = model(**kw)  # autograd on, no torch.no_grad: runs, nothing requires a gradient
    assert not out.logits.requires_grad and not any(p.requires_grad for p in model.parameters())
    emb = model.backbone.embeddings.position.weight.new_ones(3, 9, cfg.hidden_size, requires_grad=True)
    with pytest.raises(bertfam.UnsupportedError, match="inference only"):  # a ConfigError too: named for what it is
        model(inputs_embeds=emb, attention_mask=kw["attention_mask"])
    assert issubclass(bertfam.UnsupportedError, ConfigError)
    model.train()
    with pytest.raises(bertfam.UnsupportedError, match="inference only .*model.eval"):
        model(**kw)
    model.eval()
    with pytest.raises(ValueError, match="int8 and compile"):
        optimize_for_inference(model, compile=True)
    with pytest.raises(ValueError, match="int8 and compile"):
        optimize_for_inference(bertfam.build_model(cfg, seed=0), compile=True, int8=True)


def test_int8_linear_takes_any_leading_shape_and_rebuilds_its_cache():
    torch.manual_seed(0)
    lin = torch.nn.Linear(768, 96)
    torch.nn.init.normal_(lin.weight, 0.0, 0.02)  # as the models initialise (nn.Linear's uniform one saturates more)
    q = Int8Linear.from_linear(lin).eval()
    x = torch.randn(2, 5, 768)
    with torch.no_grad():
        y3 = q(x)  # (B, T, K) as the padded layout gives it
        assert y3.shape == (2, 5, 96) and torch.equal(y3.reshape(10, 96), q(x.reshape(10, 768)))
        assert q(torch.randn(0, 768)).shape == (0, 96)
        assert float((y3 - lin(x)).norm() / lin(x).norm()) < RTOL
        other = Int8Linear.from_linear(torch.nn.Linear(768, 96)).eval()
        other(x)  # packs
        other.load_state_dict(q.state_dict())  # the packed cache must follow the new buffers
        assert torch.equal(other(x), y3)
        twin = copy.deepcopy(q)
        assert torch.equal(twin(x), y3)
    assert set(q.state_dict()) == {"weight_int8", "weight_scale", "bias"}


def test_int8_embedding_and_tied_decoder():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(50, 256, padding_idx=0)
    q = Int8Embedding.from_embedding(emb).eval()
    ids = torch.tensor([[0, 3, 49], [7, 7, 1]])
    with torch.no_grad():
        rows = q(ids)  # (B, T, E)
        assert rows.shape == (2, 3, 256) and bool((rows[0, 0] == 0).all())  # the padding row stays zero
        assert bool(((rows - emb(ids)).abs() <= q.weight_scale[ids][..., None] / 2 + 1e-7).all())
        h = torch.nn.functional.layer_norm(torch.randn(4, 256), (256,))
        bias = torch.randn(50)
        ref = torch.nn.functional.linear(h, emb.weight, bias)
        assert float((q.linear(h, bias) - ref).norm() / ref.norm()) < RTOL
        assert torch.equal(q.weight, q.dequantize())


def test_meta_device_swap():
    with torch.device("meta"):
        model = bertfam.TaskModel(_cfg(task="span"))
        quantize_int8(model)
    w = model.backbone.encoder.layers[1].attn.qkv.weight_int8
    assert w.is_meta and w.dtype == torch.int8 and w.shape == (768, 256)


# ---------------------------------------------------------------- checkpoints
def _save_int8(tmp_path, head=None, **overrides):
    cfg = _cfg(**(head or dict(task="classification", num_labels=3, labels=["a", "b", "c"]))).replace(**overrides)
    plain = bertfam.build_model(cfg, seed=0).eval()
    src, dst = tmp_path / "float", tmp_path / "int8"
    plain.save_pretrained(str(src))
    model = quantize_int8(copy.deepcopy(plain))
    model.save_pretrained(str(dst))
    return plain, model, src, dst


def test_checkpoint_round_trip_is_bit_for_bit(tmp_path):
    _, model, _, dst = _save_int8(tmp_path, dict(task="mlm"))
    cfg = json.load(open(dst / "config.json"))
    assert cfg["quantization"] == {"method": "dynamic-int8", "weights": "per-channel symmetric",
                                   "modules": ["attn.qkv", "attn.out", "ffn_in", "ffn_out", "embeddings.word"]}
    back = bertfam.from_pretrained(str(dst))
    assert is_int8(back) and back.config.quantization == model.config.quantization
    assert type(back.mlm) is Int8MLMPredictor and back.mlm.word[0] is back.backbone.embeddings.word
    kw = _batch(back.config, B=4, T=16, seed=1)
    with torch.inference_mode():
        for packing in ("auto", "padded"):
            a, b = model(**kw, packing=packing), back(**kw, packing=packing)
            assert torch.equal(a.logits, b.logits) and torch.equal(a.last_hidden_state, b.last_hidden_state)
    # a float config.json stays as it was: no quantization key
    assert "quantization" not in json.load(open(tmp_path / "float" / "config.json"))


def test_loading_builds_on_meta_without_importing_the_compiler(tmp_path):
    """from_pretrained builds the model on the meta device; an init or a rounding there would run Python
    reference ops that import torch._dynamo (about 1.3 s of every process that loads a model: `bertfam mrc ask`
    took 5.1 s, now 3.1 s). A fresh process loads a float and an int8 checkpoint (int8 word embeddings
    included) with the same logits, and torch._dynamo is still not imported."""
    import subprocess
    import sys

    _, _, src, dst = _save_int8(tmp_path, dict(task="mlm"))
    code = ("import sys, torch, bertfam\n"
            f"a, b = bertfam.from_pretrained({str(src)!r}), bertfam.from_pretrained({str(dst)!r})\n"
            "ids = torch.tensor([[2, 5, 7, 3]])\n"
            "with torch.inference_mode():\n"
            "    ok = (a(input_ids=ids).logits - b(input_ids=ids).logits).abs().max().item() < 0.5\n"
            "print(ok, 'torch._dynamo' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True", "False"], r.stdout


def test_int8_checkpoint_is_under_30_percent_of_float(tmp_path):
    # on disk, a small config with a BERT-like vocabulary : hidden ratio
    _, _, src, dst = _save_int8(tmp_path, vocab_size=4000)
    ratio = os.path.getsize(dst / "model.safetensors") / os.path.getsize(src / "model.safetensors")
    assert ratio < 0.30, ratio

    # bert-base-chinese itself, counted on the meta device (no weights allocated)
    def nbytes(m):
        return sum(t.numel() * t.element_size() for t in m.state_dict().values())

    with torch.device("meta"):
        m = bertfam.TaskModel(bertfam.preset("bert-base-chinese", head=HeadConfig(task="mlm")))
        before = nbytes(m)
        quantize_int8(m)
    assert nbytes(m) / before < 0.30


def _rewrite(path, change):
    from safetensors.torch import load_file, save_file

    sd = load_file(str(path))
    change(sd)
    save_file(sd, str(path))


def _one_line_error(dst, *needles):
    with pytest.raises(CheckpointError) as e:
        bertfam.from_pretrained(str(dst))
    msg = str(e.value)
    assert "\n" not in msg and os.path.join(str(dst), "model.safetensors") in msg, msg
    for n in needles:
        assert n in msg, msg


def test_bad_int8_files_are_one_clear_error(tmp_path):
    _, _, src, dst = _save_int8(tmp_path)
    st = dst / "model.safetensors"
    good = st.read_bytes()
    key = "backbone.encoder.layers.1.ffn_out.weight_int8"

    _rewrite(st, lambda sd: sd.pop(key))
    _one_line_error(dst, f"missing weight {key}")
    st.write_bytes(good)
    _rewrite(st, lambda sd: sd.update({key: sd[key].float()}))
    _one_line_error(dst, key, "dtype float32", "int8")
    st.write_bytes(good)
    _rewrite(st, lambda sd: sd.update({"backbone.encoder.layers.0.attn.qkv.weight_scale": torch.ones(5)}))
    _one_line_error(dst, "backbone.encoder.layers.0.attn.qkv.weight_scale", "shape (5,)")
    # float weights under an int8 config.json, and int8 weights under a float one
    st.write_bytes((src / "model.safetensors").read_bytes())
    _one_line_error(dst, "weight_int8", "records int8 quantization")
    st.write_bytes(good)
    cfg = json.load(open(dst / "config.json"))
    del cfg["quantization"]
    (dst / "config.json").write_text(json.dumps(cfg))
    _one_line_error(dst, ".weight", "no quantization record")
    cfg["quantization"] = {"method": "static-int4"}
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="config.json: quantization.method must be 'dynamic-int8'"):
        bertfam.from_pretrained(str(dst))


def test_int8_checkpoint_with_a_new_head(tmp_path):
    _, _, _, dst = _save_int8(tmp_path)
    span = bertfam.from_pretrained(str(dst), task="span")  # int8 backbone, a new float head
    assert is_int8(span) and type(span.span.qa) is torch.nn.Linear and not span.span.qa.weight.is_meta
    with torch.inference_mode():
        assert span(**_batch(span.config, B=2, T=8)).start_logits.shape == (2, 8)


# ---------------------------------------------------------------- command line
@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """Tiny (hidden 32) checkpoints with the Chinese vocabulary: the flags' plumbing, not accuracy."""
    root = tmp_path_factory.mktemp("int8")
    return save_head_checkpoints(root, 32)


@pytest.fixture
def int8_calls(monkeypatch):
    """How many Int8Linear forwards ran (a flag that quantized nothing leaves it at 0)."""
    calls = []
    real = Int8Linear.forward
    monkeypatch.setattr(Int8Linear, "forward", lambda self, x: calls.append(1) or real(self, x))
    return calls


def test_quantize_command_info_and_errors(dirs, tmp_path, capsys):
    dst = tmp_path / "q"
    rc, out, err = cli(capsys, "quantize", dirs["cls"], dst)
    assert rc == 0 and out.count("\n") == 1 and "int8: model.safetensors" in out and "MB ->" in out and "%" in out
    files = {"config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "training_info.json"}
    assert files <= set(os.listdir(dst))
    assert json.load(open(dst / "training_info.json"))["quantized_from"] == dirs["cls"]
    rc, out, _ = cli(capsys, "info", dst)
    assert rc == 0 and "weights: int8 (dynamic-int8, per-channel symmetric" in out
    rc, out, _ = cli(capsys, "info", dirs["cls"])
    assert "weights: float" in out
    for bad in ([tmp_path / "nowhere", tmp_path / "x"], [dst, tmp_path / "y"], [dirs["cls"], dirs["cls"]],
                [dirs["cls"], tmp_path / "z", "--modules", "ffn"]):
        rc, out, err = cli(capsys, "quantize", *bad)
        assert rc == 2 and err.startswith("bertfam: error:") and err.count("\n") == 1, err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    rc, _, err = cli(capsys, "convert", "--to", "hf", dst, tmp_path / "hf")
    assert rc == 2 and "int8" in err


def test_int8_flags_predict_evaluate_embed(dirs, tmp_path, capsys, int8_calls):
    sst = os.path.join(FIXTURES, "finetune", "glue", "SST-2")
    rc, out, _ = cli(capsys, "predict", "--model", dirs["cls"], "--data", os.path.join(sst, "test.tsv"),
                     "--out", tmp_path / "p", "--int8")
    assert rc == 0 and (tmp_path / "p" / "SST-2.tsv").is_file() and int8_calls
    int8_calls.clear()
    rc, out, _ = cli(capsys, "evaluate", "--model", dirs["cls"], "--data", os.path.join(sst, "dev.tsv"), "--int8")
    assert rc == 0 and 0 <= json.loads(out)["value"] <= 100 and int8_calls
    int8_calls.clear()
    inp = tmp_path / "in.txt"
    inp.write_text("今天天气很好\n北京\n", encoding="utf-8")
    rc, out, _ = cli(capsys, "embed", "--model", dirs["cls"], "--input", inp, "--out", tmp_path / "e", "--int8")
    assert rc == 0 and (tmp_path / "e.mean.npy").is_file() and int8_calls
    int8_calls.clear()
    rc, out, _ = cli(capsys, "embed", "--model", dirs["cls"], "--input", inp, "--out", tmp_path / "f")
    assert rc == 0 and not int8_calls  # int8 is never the default


def test_int8_flags_mrc_predict_ask_and_demo(dirs, tmp_path, capsys, int8_calls, monkeypatch):
    dev = os.path.join(FIXTURES, "mrc", "checklist_demo_cut.json")
    pred = tmp_path / "pred.json"
    rc, out, _ = cli(capsys, "mrc", "predict", "--model", dirs["span"], "--data", dev, "--out", pred, "--int8")
    assert rc == 0 and len(json.load(open(pred))) == 8 and int8_calls
    int8_calls.clear()
    rc, out, _ = cli(capsys, "mrc", "ask", "--model", dirs["span"], "--question", "长江有多长？",
                     "--passage", "长江全长约6300公里。", "--int8")
    assert rc == 0 and "answerable" in json.loads(out) and int8_calls
    int8_calls.clear()
    from bertfam.runners.demo import DemoConfig, run_demo

    from .test_demo import first_demo_questions

    first_demo_questions(monkeypatch, 2)
    run_demo(DemoConfig(model=dirs["span"], int8=True))
    out = capsys.readouterr().out
    assert int8_calls and "parameters, int8\n" in out and "--int8 --port" in out


def test_pipeline_and_service_int8(dirs, int8_calls):
    from bertfam.serving.service import Service

    clf = bertfam.pipeline("classification", dirs["cls"], int8=True)
    assert is_int8(clf.model) and clf("今天天气很好")[0]["label"] in ("0", "1") and int8_calls
    assert not is_int8(bertfam.pipeline("classification", dirs["cls"]).model)
    service = Service.from_dirs([dirs["span"], dirs["cls"]], int8=True)
    try:
        assert [m["int8"] for m in service.describe()["models"]] == [True, True]
        assert all(is_int8(r.predictor.model) for r in service.routes.values())
    finally:
        service.shutdown()


# ---------------------------------------------------------------- ONNX
def test_export_onnx_int8(tmp_path, capsys, monkeypatch):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    import onnx

    from bertfam.export.onnx import onnx_session, verify_onnx

    plain, _, src, dst = _save_int8(tmp_path, dict(task="span"))
    out = tmp_path / "o" / "span.onnx"
    rc, so, err = cli(capsys, "export", "--onnx", src, out, "--int8")
    assert rc == 0 and "int8" in so and "max abs difference / max abs output" in so, err
    assert os.listdir(tmp_path / "o") == ["span.onnx"]  # atomic: no float intermediate or temporary left
    proto = onnx.load(str(out))
    ops = {n.op_type for n in proto.graph.node}
    assert {"MatMulInteger", "DynamicQuantizeLinear"} <= ops
    meta = {p.key: p.value for p in proto.metadata_props}
    assert meta["bertfam_task"] == "span" and "dynamic int8" in meta["bertfam_quantization"]
    sess = onnx_session(str(out))
    rel = verify_onnx(str(out), plain, ((1, 5), (3, 17)), session=sess, relative=True)
    assert set(rel) == {"start_logits", "end_logits", "answerable_logits"}
    assert max(rel.values()) < 0.1, rel  # max-norm relative error (stricter than the Frobenius one above)
    rc, _, err = cli(capsys, "export", "--onnx", dst, tmp_path / "y.onnx")  # an int8 checkpoint: export its float one
    assert rc == 2 and "int8" in err and not (tmp_path / "y.onnx").exists()
    rc, _, err = cli(capsys, "export", "--onnx", src, tmp_path / "z.onnx", "--rtol", "0.1")
    assert rc == 2 and "--rtol is for --int8" in err
    import shutil

    import bertfam.export.onnx as onnx_mod

    def reuse(model, path, opset=None, int8=False):  # the same export again, without tracing it again
        shutil.copy(out, path)
        return {"inputs": ["input_ids", "attention_mask", "token_type_ids"],
                "outputs": ["start_logits", "end_logits", "answerable_logits"], "task": "span", "int8": int8}

    monkeypatch.setattr(onnx_mod, "export_onnx", reuse)
    rc, _, err = cli(capsys, "export", "--onnx", src, tmp_path / "x.onnx", "--int8", "--rtol", "1e-9")
    assert rc == 2 and "--rtol" in err and err.count("\n") == 1


def test_engine_is_restored_and_packing_is_quiet(recwarn):
    before = torch.backends.quantized.engine
    Int8Linear.from_linear(torch.nn.Linear(32, 8)).eval()(torch.randn(2, 32))
    assert torch.backends.quantized.engine == before
    assert not [w for w in recwarn if "quantiz" in str(w.message).lower()]
    assert int8_mod.ENGINES[0] == "onednn" and int8_mod.REDUCE_RANGE is False


# ---------------------------------------------------------------- back to float, for training
def test_dequantize_gives_trainable_float_modules_with_the_int8_weights(tmp_path):
    """from_pretrained(int8 dir, dequantize=True): float modules holding exactly the weights the int8 ones
    stood for, the MLM decoder still tied to the embeddings, no quantization record, gradients flow."""
    from bertfam.modeling.int8 import Int8Linear, dequantize_int8

    _, model, _, dst = _save_int8(tmp_path, dict(task="mlm"))
    lin = model.backbone.encoder.layers[0].attn.qkv
    assert isinstance(lin, Int8Linear)
    want = lin.dequantize().clone()
    back = bertfam.from_pretrained(str(dst), dequantize=True)
    assert not is_int8(back) and back.config.quantization is None and type(back.mlm) is not Int8MLMPredictor
    assert back.backbone.config is back.config  # still one shared config
    assert torch.equal(back.backbone.encoder.layers[0].attn.qkv.weight, want)
    assert back.mlm.word[0] is back.backbone.embeddings.word
    assert torch.equal(back.backbone.embeddings.word.weight, model.backbone.embeddings.word.dequantize())
    kw = _batch(back.config, B=2, T=8, seed=2)
    back.train()
    out = back(**kw, labels=kw["input_ids"])
    out.loss.backward()
    assert all(p.requires_grad for p in back.parameters()) and back.backbone.embeddings.word.weight.grad is not None
    assert dequantize_int8(back) is back and not is_int8(back)  # nothing left to swap: a no-op
    # a dequantized model saved again is a float checkpoint
    back.save_pretrained(str(tmp_path / "again"))
    assert "quantization" not in json.load(open(tmp_path / "again" / "config.json"))


def test_mrc_train_starts_from_an_int8_checkpoint(dirs, tmp_path, capsys):
    """The shipped MRC model stores int8 word embeddings: `mrc train --model` on such a directory trains."""
    src = str(tmp_path / "span8")
    rc, _, _ = cli(capsys, "quantize", dirs["span"], src, "--modules", "embeddings.word")
    assert rc == 0
    data = os.path.join(FIXTURES, "mrc", "checklist_demo_cut.json")
    rc, _, err = cli(capsys, "mrc", "train", "--model", src, "--train", data, "--out", str(tmp_path / "out"),
                     "--max-steps", "2", "--batch-size", "4", "--max-length", "96", "--doc-stride", "32")
    assert rc == 0, err
    out = bertfam.from_pretrained(str(tmp_path / "out"))
    assert not is_int8(out) and out.config.quantization is None


def test_weights_only_checkpoint_is_int8_on_disk_and_float_when_loaded(dirs, tmp_path, capsys):
    """quantize --weights-only: the file holds the int8 weights (a fraction of the float file) under method
    weight-int8; from_pretrained gives float modules with exactly the weights the int8 ones stand for, so its
    outputs are the dequantized model's, close to the source's, and no int8 kernel runs."""
    src = dirs["span"]
    dst, dyn = tmp_path / "w8", tmp_path / "d8"
    rc, out, _ = cli(capsys, "quantize", src, dst, "--weights-only")
    assert rc == 0 and "int8 weights, float computing" in out
    assert cli(capsys, "quantize", src, dyn)[0] == 0
    rec = json.load(open(dst / "config.json"))["quantization"]
    assert rec["method"] == "weight-int8" and "embeddings.word" in rec["modules"]
    assert os.path.getsize(dst / "model.safetensors") < 0.5 * os.path.getsize(os.path.join(src, "model.safetensors"))
    assert os.path.getsize(dst / "model.safetensors") == os.path.getsize(dyn / "model.safetensors")
    w8 = bertfam.from_pretrained(str(dst))
    assert not is_int8(w8) and w8.config.quantization is None
    same = bertfam.from_pretrained(str(dyn), dequantize=True)  # the same int8 tensors, turned float
    ref = bertfam.from_pretrained(src)
    kw = _batch(w8.config, B=2, T=16, seed=3)
    with torch.inference_mode():
        a, b, c = (m(**kw).start_logits for m in (w8, same, ref))
    assert torch.equal(a, b) and not torch.equal(a, c) and torch.allclose(a, c, atol=0.05)
    rc, out, _ = cli(capsys, "info", dst)
    assert rc == 0 and "weights: int8 on disk (weight-int8" in out and "computes in float" in out
    rc, _, err = cli(capsys, "quantize", src, tmp_path / "both", "--weights-only", "--calibrate", str(dst / "vocab.txt"))
    assert rc == 2 and "--weights-only" in err and err.count("\n") == 1 and not (tmp_path / "both").exists()


def test_thresholds_saved_into_a_weights_only_checkpoint_keep_its_record(dirs, tmp_path, capsys):
    """save_thresholds on a weight-int8 directory (as recipes/mrc_checklist_cv.py --final-model does) rewrites
    config.json from a model that loaded as float: the quantization record on disk must survive, or the
    int8 tensors no longer load."""
    from bertfam.tasks.mrc import save_thresholds

    dst = tmp_path / "w8"
    assert cli(capsys, "quantize", dirs["span"], dst, "--weights-only")[0] == 0
    model = bertfam.from_pretrained(str(dst))
    save_thresholds(model, str(dst), {"null_threshold": 0.5, "answerable_threshold": 0.6, "dev_f1": 50.0}, "test")
    rec = json.load(open(dst / "config.json"))
    assert rec["quantization"]["method"] == "weight-int8" and rec["head"]["mrc"]["answerable_threshold"] == 0.6
    again = bertfam.from_pretrained(str(dst))
    assert again.config.head.mrc.null_threshold == 0.5 and not is_int8(again)


@pytest.mark.parametrize("k", [64, 65, 768])
def test_dynamic_kernel_packs_fitted_weights_without_vnni(k, monkeypatch):
    """The dynamic kernel saturates like the static one on a CPU without VNNI (vpmaddubsw's int16 pair sums):
    there pack_linear packs the fitted rows (int8.fit_weights), which multiply exactly even where every
    input reaches the top code; forced here, so that it runs on any CPU."""
    g = torch.Generator().manual_seed(k)
    w = torch.randint(-127, 128, (48, k), generator=g, dtype=torch.int8)
    s = torch.full((48,), 0.01)
    q, s2 = int8_mod.fit_weights(w, s)
    x = torch.full((7, k), 2.0)  # one value: every code is 255 (the range is [0, 2])

    def rel_err(packed, wq, ws):
        ref = torch.full((7, k), 255.0).double() @ (wq.double() * ws.double()[:, None]).t() * (2.0 / 255)
        return float((int8_mod.int8_linear(x, packed).double() - ref).abs().max() / ref.abs().max())

    exact = int8_mod.exact_u8s8()  # this CPU's
    monkeypatch.setattr(int8_mod, "exact_u8s8", lambda: False)
    assert rel_err(int8_mod.pack_linear(w, s, None), q, s2) < 1e-6  # what was packed: the fitted rows
    if not exact:
        monkeypatch.setattr(int8_mod, "exact_u8s8", lambda: True)  # the raw rows on this CPU: saturated
        assert rel_err(int8_mod.pack_linear(w, s, None), w, s) > 0.01
