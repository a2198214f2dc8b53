"""Fuzz the MRC reader and the evaluator: mutated fixture JSON (bytes and structure), wrong types,
unicode edge cases. Only typed bertfam errors may escape; every question is kept or reported."""
import json
import os
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertfam import BertfamError
from bertfam.data.mrc import read_mrc
from bertfam.evaluation.dureader import evaluate_files, f1_score, normalize, tokenize

from .conftest import FIXTURES

FIX = os.path.join(FIXTURES, "mrc", "checklist_demo_cut.json")
with open(FIX, "rb") as _f:
    RAW = _f.read()
BASE = json.loads(RAW)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10 ** 6) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


def _check_read(path):
    try:
        ex, rep = read_mrc(path)
    except BertfamError:
        return
    assert rep.kept == len(ex)
    assert rep.kept + sum(v for k, v in rep.skipped.items() if k not in ("bad document", "bad paragraph")) \
        == rep.questions  # nothing silently dropped
    for e in ex:
        for a in e.answers:
            assert e.context[a.start:a.end] == a.text


def _paths(obj):
    """Every (container, key) slot in a JSON tree."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append((obj, k))
            out.extend(_paths(v))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.append((obj, i))
            out.extend(_paths(v))
    return out


@SETTINGS
@given(seed=st.integers(0, 10 ** 9), value=json_values)
def test_structural_mutation(tmp_path_factory, seed, value):
    obj = json.loads(RAW)
    slots = _paths(obj)
    rng = random.Random(seed)
    for _ in range(rng.randint(1, 3)):
        container, key = rng.choice(slots)
        if rng.random() < 0.2 and isinstance(container, dict):
            container.pop(key, None)
        else:
            container[key] = value
    d = tmp_path_factory.mktemp("fz")
    data = d / "d.json"
    data.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    _check_read(str(data))
    pred = d / "p.json"
    pred.write_text(json.dumps({"x": value, "e0285179a076cfb1e667042de441d1b5": value}), encoding="utf-8")
    for p in (pred, data):
        try:
            r = evaluate_files(str(data), str(p), tag=rng.choice([None, "in", ""]))
            assert 0.0 <= float(r["F1"]) <= 100.0 and r["SKIP"] <= r["TOTAL"]
        except BertfamError:
            pass


@SETTINGS
@given(seed=st.integers(0, 10 ** 9), n=st.integers(1, 20))
def test_byte_mutation(tmp_path_factory, seed, n):
    rng = random.Random(seed)
    raw = bytearray(RAW)
    for _ in range(n):
        op = rng.random()
        i = rng.randrange(len(raw))
        if op < 0.4:
            raw[i] = rng.randrange(256)
        elif op < 0.7:
            del raw[i:i + rng.randint(1, 40)]
        else:
            raw[i:i] = bytes(rng.choice([b"\xe2\x80\xa6", b"\x00", b"{", b"]", b'"', b"\xff", b"-1", b"null"]))
    p = tmp_path_factory.mktemp("fb") / "d.json"
    p.write_bytes(bytes(raw))
    _check_read(str(p))


@settings(max_examples=200, deadline=None)
@given(a=st.text(max_size=12), b=st.text(max_size=12))
def test_metric_invariants_on_arbitrary_unicode(a, b):
    f = f1_score([a], b)
    assert 0.0 <= f <= 1.0
    assert abs(f - f1_score([b], a)) < 1e-12  # one reference: precision and recall swap, F1 is symmetric
    if tokenize(normalize(a)):
        assert f1_score([a], a) == 1.0
    assert "".join(tokenize(normalize(a))) == normalize(a)  # tokens partition the normalised text
