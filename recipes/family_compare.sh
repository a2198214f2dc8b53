#!/usr/bin/env bash
# The BERT family at equal budget (BERT / RoBERTa / ERNIE / ALBERT objectives on one bert-mini shape with the
# bert-base-chinese vocabulary, same corpus, steps and seed), fine-tuned on ChnSentiCorp, TNEWS, CLUENER and
# the MRC set with two seeds, beside multilingual-e5-small; the table goes into docs/results.md, the chart
# into docs/family_compare.png. See recipes/family_compare.py for the stages.
#
#   bash recipes/family_compare.sh            # SHARED=../shared/data RUN=runs/family; ~75 min on 2 CPU cores
#
# Budget, shrunk for 2 CPU cores: pre-training 300 steps x 32 sequences x 128 tokens (1.2M tokens, about two
# passes over the 3 MB corpus), fine-tuning 120 steps per task and seed. Stages whose results exist are
# skipped, so a stopped run resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
SHARED=${SHARED:-../shared/data}
RUN=${RUN:-runs/family}
$PY recipes/family_compare.py --shared "$SHARED" --run "$RUN" --pretrain-steps "${PRETRAIN_STEPS:-300}" \
  --finetune-steps "${FINETUNE_STEPS:-120}" --doc docs/results.md --chart docs/family_compare.png "$@"
