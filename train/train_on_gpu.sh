#!/usr/bin/env bash
# The one GPU call: trains the small model on one H200 within ~8 minutes of wall time and writes
# everything under $OUT (log.jsonl, train.log, state.pt, bf16/). Needs only what the GPU machine
# has (torch, transformers 5.17 with qwen4_exp, tokenizers, numpy) and the committed
# train/tokenizer/. Run from the repository root:  OUT=/some/dir bash train/train_on_gpu.sh
# A second call with RESUME=1 and the same $OUT/state.pt continues a cut-short run.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the output folder}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1 || true
python3 -c "import torch, transformers, tokenizers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__)" | tee "$OUT/versions.txt"
python3 train/train.py --out "$OUT" --minutes "${MINUTES:-5.5}" --batch "${BATCH:-32}" --seq 2048 \
  --seed "${SEED:-1}" --workers 8 --check_indexer ${RESUME:+--resume} 2>&1 | tee -a "$OUT/train.log"
# state.pt holds the optimizer too (3x the model): keep it only when asked, to resume elsewhere
[ -n "${KEEP_STATE:-}" ] || rm -f "$OUT/state.pt"
ls -la "$OUT" "$OUT/bf16"
