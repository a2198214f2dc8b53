"""The one rule for blank text, shared by the pipelines, the MRC predictor and the HTTP schema.

A text is blank when it holds no character but whitespace, zero-width or other format characters
(U+200B, U+FEFF, ...), NUL or other control characters: `"  "`, `"\\u200b\\u200b"`, `"\\x00"` are blank, and
a model would be asked about nothing. `str.strip()` is not that rule: it keeps U+200B and NUL.

The rule is written once, as a regular expression that finds one non-blank character (`NOT_BLANK`),
because the same text must mean the same to Python's `re`, to pydantic (Rust `regex`) and to a JSON
Schema reader (ECMA-262): only `\\uXXXX` escapes in one character class, which all three read alike. The
class is every Basic Multilingual Plane character that `str.isspace()` accepts or whose Unicode category is
Cc, Cf, Zs, Zl or Zp (Unicode 14, Python 3.11); characters beyond U+FFFF count as content.
"""
from __future__ import annotations

import re

# (first, last) code points, inclusive
BLANK_RANGES = ((0x0000, 0x0020), (0x007F, 0x00A0), (0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C),
                (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x1680, 0x1680),
                (0x180E, 0x180E), (0x2000, 0x200F), (0x2028, 0x202F), (0x205F, 0x2064), (0x2066, 0x206F),
                (0x3000, 0x3000), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB))
NOT_BLANK = "[^" + "".join(f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in BLANK_RANGES) + "]"
BLANK_MESSAGE = "must not be blank (empty, or only whitespace, zero-width, NUL or control characters)"
_NOT_BLANK = re.compile(NOT_BLANK)


def is_blank(text: str) -> bool:
    return _NOT_BLANK.search(text) is None
