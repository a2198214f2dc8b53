"""Put a recipe's printed table into a doc between its two marker comments, so the doc holds exactly what
the run measured (used by glue_results_doc.py and family_compare.py)."""
from __future__ import annotations

import os


def replace_section(doc: str, text: str, begin: str, end: str) -> None:
    """Replace what lies between `begin` and `end` in `doc` with `text` (a missing doc starts as the two
    markers); written atomically. A doc without both markers stops the recipe with one line."""
    old = open(doc, encoding="utf-8").read() if os.path.isfile(doc) else f"{begin}\n{end}\n"
    if begin not in old or end not in old:
        raise SystemExit(f"{doc}: no {begin} ... {end} markers to put the table between")
    i, j = old.index(begin) + len(begin), old.index(end)
    tmp = doc + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(old[:i] + "\n" + text + "\n" + old[j:])
    os.replace(tmp, doc)
