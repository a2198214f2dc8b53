"""One blank-text rule (bertfam/tasks/blank.py) for the pipelines, the MRC predictor and the HTTP schema."""
import unicodedata

import pytest

from bertfam.tasks.blank import BLANK_MESSAGE, BLANK_RANGES, NOT_BLANK, is_blank
from bertfam.tasks.pipelines import InputError

from .serving_helpers import make_tiny_models

BLANKS = ["", " ", "\t\n\r", "\u3000", "\u00a0", "\u200b\u200b", "\ufeff", "\u200d\u2060", "\x00", "\x00\x07\x1b",
          "\u2028\u2029", "\u0085", " \u200b \x00 "]
FILLED = ["a", " a ", "\u200b好\u200b", "0", "[MASK]", "\U0001f600", "\x00.", "\U000e0001"]


def test_blank_ranges_are_the_unicode_rule():
    """Every BMP character is blank exactly when str.isspace() or its category is Cc/Cf/Zs/Zl/Zp (so the
    hard-written ranges cannot drift from the rule they stand for)."""
    inside = {c for a, b in BLANK_RANGES for c in range(a, b + 1)}
    for c in range(0x10000):
        if 0xD800 <= c <= 0xDFFF:
            continue  # lone surrogates are refused before this rule (not valid Unicode text)
        ch = chr(c)
        want = ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf", "Zs", "Zl", "Zp")
        assert (c in inside) == want, hex(c)
        assert is_blank(ch) == want, hex(c)


@pytest.mark.parametrize("text", BLANKS)
def test_blank_texts(text):
    assert is_blank(text)


@pytest.mark.parametrize("text", FILLED)
def test_texts_with_content(text):
    assert not is_blank(text)


def test_the_schema_pattern_means_the_same_to_pydantic():
    from pydantic import BaseModel, Field, ValidationError

    class M(BaseModel):
        t: str = Field(pattern=NOT_BLANK)
    for text in BLANKS:
        with pytest.raises(ValidationError):
            M(t=text)
    for text in FILLED:
        M(t=text)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return make_tiny_models(str(tmp_path_factory.mktemp("models")))


@pytest.mark.parametrize("task,head,item,field", [
    ("classification", "classification", {"text": "\u200b"}, "text"),
    ("classification", "classification", {"text": "好", "text_pair": "\x00"}, "text_pair"),
    ("ner", "token", {"text": "\u3000\t"}, "text"),
    ("embed", "span", {"text": ""}, "text"),
    ("fill-mask", "mlm", {"text": "\ufeff"}, "text"),
    ("mrc", "span", {"question": "q", "passage": "\u200b\u200b"}, "passage"),
    ("mrc", "span", {"question": "\x00", "passage": "北京是首都。"}, "question"),
])
def test_every_pipeline_refuses_blank_text_naming_the_field(dirs, task, head, item, field):
    import bertfam

    pipe = bertfam.pipeline(task, dirs[head])
    with pytest.raises(InputError) as e:
        pipe(item)
    assert e.value.field == field and e.value.message == BLANK_MESSAGE
    with pytest.raises(InputError) as e:
        pipe([{**item, field: "好[MASK]"}, item])  # a good item first: the second is named
    assert e.value.field == f"[1].{field}"


def test_mrc_predictor_does_not_answer_a_zero_width_passage(dirs):
    import bertfam
    from bertfam.tasks.mrc import MRCPredictor

    pred = MRCPredictor(bertfam.from_pretrained(dirs["span"]), verifier=False)
    out = pred.predict_batch([{"question": "首都？", "passage": "\u200b\u200b"}])
    assert out[0].answerable is False and out[0].answer is None
