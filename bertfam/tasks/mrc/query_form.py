"""Whether a question is asked with a question word or is a search engine's keyword query.

DuReader's questions are search queries. Some ask (北京大学创建于哪一年？, 打完疫苗可以喝酒吗); the others name
their topic and stop (番石榴汁热量, 五味子的功效与作用, stop过去式). On the 567 real DuReader-checklist dev
questions (146 of them keyword queries by this module's test) the two kinds differ where it matters to a
reader: the answerable keyword queries' references are longer (median 31 characters against 9; 65 of the
269 answerable questions are keyword queries) and start later in their passage (34 of 65 within the first 20
characters, against 118 of 204), because a keyword query asks for the passage's statement about its topic,
not for one name or number. `MRCSettings.keyword_use_title` and `keyword_extension` read and decode such
questions their own way (recipes/mrc_checklist_cv.py `--keyword-title`, `--keyword-extension`).
"""
from __future__ import annotations

import re

# question words and marks, full- and half-width; a question holding none of them is a keyword query.
# 何 only in the words that ask (任何时候 does not); 么 covers 什么 / 怎么 / 为什么 / 那么 alike (a keyword
# query rarely holds one); a final 不 / 没 asks yes or no (可以喝酒不), a final 是 asks what (变形计作者是)
_ASKS = re.compile(r"[？?吗呢么啥咋谁哪几]|还是|多少|多大|多长|多高|多久|多远|多重|多宽|多深|多厚|如何|为何|(?<!任)何(?:时|地|处|种)|"
                   r"是否|能否|可否|能不能|可不可以|有没有|会不会|是不是|好不好|要不要|行不行|对不对|[不没是]$")


def is_keyword_query(question: str) -> bool:
    """True when `question` has no question word or question mark (番石榴汁热量, 五味子的功效与作用); False for
    a question that asks (中国的首都是哪里？; 打完疫苗可以喝酒不, a yes/no question ending in 不 or 没) and for a
    blank one."""
    q = question.strip()
    return bool(q) and _ASKS.search(q) is None
