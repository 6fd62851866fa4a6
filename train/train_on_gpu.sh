#!/usr/bin/env bash
# The one GPU call: trains the small model on one H200 within ~8 minutes of wall time and writes
# everything under $OUT (log.jsonl, train.log, bf16.tar.xz.part-*: the BF16 export). Needs only what the GPU machine
# has (torch, transformers 5.17 with qwen4_exp, tokenizers, numpy) and the committed
# train/tokenizer/. Run from the repository root:  OUT=/some/dir bash train/train_on_gpu.sh
# A second call with RESUME=1 and the same $OUT/state.pt continues a cut-short run on that machine;
# INIT=DIR starts from an earlier run's BF16 export (carried along) with a new optimizer.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the output folder}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1 || true
python3 -c "import torch, transformers, tokenizers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__)" | tee "$OUT/versions.txt"
PYTHONUNBUFFERED=1 python3 train/train.py --out "$OUT" --minutes "${MINUTES:-7.3}" --batch "${BATCH:-32}" --lr "${LR:-2e-3}" \
  --seq 2048 --seed "${SEED:-1}" --workers 12 --check_indexer ${RESUME:+--resume} ${INIT:+--init "$INIT"} ${PROFILE:+--profile} \
  2>&1 | tee -a "$OUT/train.log"
# state.pt (model and optimizer, ~190 MB) is too big for the device tool to return: it stays for a
# resume on that machine. The BF16 export (~32 MB) comes back in pieces under 16 MiB.
rm -f "$OUT/state.pt"
tar cf - -C "$OUT" bf16 | xz -1 -T0 | split -b 15M - "$OUT/bf16.tar.xz.part-"
rm -rf "$OUT/bf16"
ls -la "$OUT"
