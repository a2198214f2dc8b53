"""Traditional -> simplified Chinese for MRC examples, answer offsets kept.

DRCD (Taiwan Wikipedia) is written in traditional characters; the checklist questions the shipped reader is
judged on, and most of its training data, are simplified. The pruned e5 vocabulary covers both scripts, but a
traditional character is another piece than its simplified twin, so what the reader learns from DRCD would
only partly carry over. OpenCC's `t2s` converts (a well-kept library, not a hand-written table); most of its
mappings are one character to one, but a phrase mapping may change a length, so every answer is placed again
and checked against the converted passage, and an example whose answer cannot be placed is dropped and
counted, never kept with a wrong span.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Optional

from bertfam.data.mrc import MRCAnswer, MRCExample


def opencc_converter(config: str = "t2s") -> Callable[[str], str]:
    """OpenCC's converter as a function; a clear error where the optional dependency is missing."""
    try:
        import opencc
    except ImportError as e:  # pragma: no cover - the zh extra installs it
        raise RuntimeError("traditional -> simplified conversion needs OpenCC: pip install 'bertfam[zh]'") from e
    return opencc.OpenCC(config).convert


def _placed(answer: MRCAnswer, context: str, new_context: str, convert: Callable[[str], str]) -> Optional[MRCAnswer]:
    """The answer at its place in the converted passage, or None where it cannot be placed exactly."""
    text = convert(answer.text)
    # the converted prefix's length is where the answer starts, whatever lengths the conversion changed before it
    start = answer.start if len(new_context) == len(context) else len(convert(context[:answer.start]))
    if new_context[start:start + len(text)] == text:
        return MRCAnswer(text, start)
    return None


def simplified_examples(examples: Iterable[MRCExample],
                        convert: Optional[Callable[[str], str]] = None) -> tuple[list[MRCExample], int]:
    """(the examples in simplified characters, how many were dropped because an answer could not be placed)."""
    convert = convert or opencc_converter()
    out, dropped = [], 0
    for ex in examples:
        context = convert(ex.context)
        answers = [_placed(a, ex.context, context, convert) for a in ex.answers]
        if any(a is None for a in answers):
            dropped += 1
            continue
        out.append(dataclasses.replace(ex, context=context, question=convert(ex.question),
                                       title=convert(ex.title), answers=answers))
    return out, dropped
