#!/usr/bin/env bash
# The family comparison at a larger budget on a lent GPU machine (the device tool), <= 10 minutes:
# bert-small shape (4 layers, 512 hidden), 1,500 pre-training steps of 128 x 128 tokens per objective
# (24.6M tokens, 20x the CPU recipe), 400 fine-tuning steps per task and seed, no e5 reference row.
# The GPU image has torch, transformers, tokenizers, safetensors, scikit-learn and matplotlib but not the data
# (outside the repository) nor jieba and seqeval, so stage them first, here, into an ignored folder:
#
#   .venv/bin/python recipes/family_compare.py --stage-data runs/family-gpu --mrc-data runs/mrc-data
#   # device tool: run(command="OUT=$OUT bash recipes/family_compare_gpu.sh", carry=["runs/family-gpu"])
#
# Writes $OUT/family/ (runs, results.json), $OUT/family.md (the table) and $OUT/family.png. A deadline
# stops starting new fine-tuning runs after 8 minutes so the table comes back inside the limit.
set -euo pipefail
cd "$(dirname "$0")/.."
G=${G:-runs/family-gpu}
OUT=${OUT:?set OUT to the output folder}
export PYTHONPATH="$PWD:$G/site:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
printf '<!-- family-table -->\n<!-- /family-table -->\n' > "$OUT/family.md"
python3 recipes/family_compare.py --py python3 --shared "$G/shared" --mrc-data "$G/mrc" --run "$OUT/family" \
  --shape bert-small --pretrain-steps "${PRETRAIN_STEPS:-1500}" --pretrain-batch 128 \
  --finetune-steps "${FINETUNE_STEPS:-400}" --no-reference --deadline-s "${DEADLINE_S:-480}" \
  --doc "$OUT/family.md" --chart "$OUT/family.png" 2>&1 | tee "$OUT/family.log"
