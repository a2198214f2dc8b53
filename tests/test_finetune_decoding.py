"""Tag decoding (BIO / BIOES / BMES) and task metrics against known values."""
import pytest

from bertfam.evaluation.glue import PAPER_LABEL, results_table
from bertfam.evaluation.metrics import accuracy, binary_f1, correlations, entity_prf, macro_f1, matthews
from bertfam.tasks.decoding import detect_scheme, entities, spans_to_tags, tags_to_spans
from bertfam.tasks.table import TASK_TABLE, get_task


@pytest.mark.parametrize("tags,spans", [
    (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 2), ("LOC", 3, 4)]),  # BIO
    (["B-PER", "E-PER", "S-LOC", "O", "B-ORG", "I-ORG", "E-ORG"], [("PER", 0, 2), ("LOC", 2, 3), ("ORG", 4, 7)]),
    (["B-NAME", "M-NAME", "E-NAME", "S-ORG", "O"], [("NAME", 0, 3), ("ORG", 3, 4)]),  # BMES
    (["B-PER", "B-PER", "I-PER"], [("PER", 0, 1), ("PER", 1, 3)]),  # adjacent entities of one type
    (["I-LOC", "I-LOC", "O", "I-PER"], [("LOC", 0, 2), ("PER", 3, 4)]),  # ill-formed: I- starts an entity
    (["B-PER", "I-LOC", "E-LOC"], [("PER", 0, 1), ("LOC", 1, 3)]),  # type change breaks the entity
    (["O", "O"], []),
    ([], []),
])
def test_tags_to_spans(tags, spans):
    assert tags_to_spans(tags) == spans


@pytest.mark.parametrize("scheme", ["BIO", "BIOES", "BMES"])
def test_spans_round_trip(scheme):
    spans = [("PER", 0, 1), ("LOC", 2, 5), ("ORG", 5, 7)]
    tags = spans_to_tags(spans, 8, scheme)
    assert tags_to_spans(tags) == spans
    assert detect_scheme([tags]) == scheme
    if scheme == "BMES":
        assert tags[:5] == ["S-PER", "O", "B-LOC", "M-LOC", "E-LOC"]


def test_entities_text():
    toks = list("我在北京")
    assert entities(toks, ["O", "O", "B-LOC", "I-LOC"]) == [{"type": "LOC", "start": 2, "end": 4, "text": "北京"}]


def test_classification_metrics_known_values():
    assert binary_f1([0, 1, 0, 0, 1], [0, 1, 1, 0, 1], positive=1)["f1"] == pytest.approx(80.0)
    assert binary_f1(["0", "1"], ["1", "1"], positive="1")["f1"] == pytest.approx(200 / 3)
    # scikit-learn's documented example: MCC = -1/3
    assert matthews([1, -1, 1, 1], [1, 1, 1, -1])["mcc"] == pytest.approx(-100 / 3)
    assert matthews([1, 1, 1], [0, 1, 1])["mcc"] == 0.0  # constant prediction: MCC is 0, not NaN
    assert macro_f1([0, 2, 1, 0, 0, 1], [0, 1, 2, 0, 1, 2])["macro_f1"] == pytest.approx(26.6666, abs=1e-3)
    assert accuracy(["a", "b", "b"], ["a", "b", "a"])["accuracy"] == pytest.approx(200 / 3)


def test_correlations():
    c = correlations([1, 2, 3, 4], [1, 4, 9, 16])
    assert c["spearman"] == pytest.approx(100.0) and 97 < c["pearson"] < 99.9
    assert correlations([1, 1, 1], [1, 2, 3])["pearson"] == 0.0


def test_entity_prf_seqeval_known_value():
    gold = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    pred = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    m = entity_prf(pred, gold)  # seqeval's README example: P = R = F1 = 0.50
    assert m["precision"] == pytest.approx(50) and m["recall"] == pytest.approx(50) and m["f1"] == pytest.approx(50)
    assert m["f1_PER"] == pytest.approx(100) and m["f1_MISC"] == pytest.approx(0)
    bmes = [["B-NAME", "M-NAME", "E-NAME", "S-ORG"]]
    assert entity_prf(bmes, bmes)["f1"] == pytest.approx(100)
    assert entity_prf([["B-NAME", "M-NAME", "E-NAME", "O"]], bmes)["recall"] == pytest.approx(50)


def test_task_table_rows():
    assert get_task("SST-2") is TASK_TABLE["sst2"] and get_task("mnli_mm") is TASK_TABLE["mnli-mm"]
    assert TASK_TABLE["stsb"].kind == "regression" and TASK_TABLE["stsb"].head == "regression"
    assert TASK_TABLE["cola"].metric == "mcc" and TASK_TABLE["mrpc"].headline == "f1"
    assert TASK_TABLE["cluener"].kind == "token" and TASK_TABLE["cluener"].headline == "f1"
    assert len(TASK_TABLE["tnews"].labels) == 15 and TASK_TABLE["ocnli"].kind == "pair"


def test_results_table_labels_paper_numbers():
    t = results_table([{"task": "sst2", "metric": "accuracy", "value": 91.23, "n_train": 10, "n_dev": 5,
                        "note": "dev: x"}, {"task": "wnli", "metric": "accuracy", "value": 50.0}])
    assert "91.2" in t and "93.5" in t and "n/a" in t and PAPER_LABEL in t and "test server" in t
