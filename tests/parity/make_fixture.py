#!/usr/bin/env python3
"""Turns the output of hf_reference.py into the committed parity fixture that CI checks without
Python: a JSON index (cases, greedy tokens, ambiguous QSA positions, provenance) and a raw
little-endian float32 file of every case's all-position logits.

    python3 tests/parity/make_fixture.py REF.json CHECKPOINT_DIR SEED OUT_STEM
"""
import hashlib
import json
import sys
from pathlib import Path


def main():
    ref_path, ckpt, seed, out_stem = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    ref = json.loads(Path(ref_path).read_text())
    blob = Path(ref_path).with_suffix(".bin").read_bytes()
    out_bin = bytearray()
    cases = []
    for c in ref["cases"]:
        la = c["logits_all"]
        offset = len(out_bin)
        out_bin += blob[la["offset"]:la["offset"] + la["nbytes"]]
        ambiguous = sorted({q for layer in c["qsa_scores"].values() for q in layer["ambiguous_queries"]})
        cases.append({
            "name": c["name"],
            "ids": c["ids"],
            "greedy": c["greedy_nocache"]["tokens"],
            "logits": {"shape": la["shape"], "offset": offset, "nbytes": la["nbytes"]},
            "qsa_tied_queries": ambiguous,
        })
    meta = ref["meta"]
    index = {
        "format": "q38-parity-v1",
        "reference": {k: meta[k] for k in ("torch", "transformers", "device", "device_name", "dtype",
                                           "attn_implementation", "experts_implementation")},
        "checkpoint": {
            "generator": "q38-make-checkpoint --size tiny",
            "seed": seed,
            "model_safetensors_sha256": hashlib.sha256((ckpt / "model.safetensors").read_bytes()).hexdigest(),
        },
        "cases": cases,
    }
    out_stem.parent.mkdir(parents=True, exist_ok=True)
    out_stem.with_suffix(".json").write_text(json.dumps(index, indent=1) + "\n")
    out_stem.with_suffix(".bin").write_bytes(bytes(out_bin))


if __name__ == "__main__":
    main()
