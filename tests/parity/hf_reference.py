#!/usr/bin/env python3
"""Hugging Face reference logits for q38 parity tests (qwen4_exp / Qwen3.8-Flash-Next, text only).

Reads a checkpoint in the published NVFP4 release layout (BF16 backbone under
`model.language_model.*`, ModelOpt NVFP4 per-expert routed experts, FP8 PLE n-gram table
shards with one BF16 `weight_scale`), dequantizes it exactly into the parameter layout of
`transformers`' `Qwen4ExpForCausalLM`, and records, for every case of a token file:

  * the logits of every position of a full-sequence forward (and the last position),
  * a greedy continuation of N tokens computed by repeated full forwards (no cache), with the
    last-position logits of every step,
  * a teacher-forced cached decode (HF DynamicCache) and its per-step max |diff| against the
    no-cache logits,
  * `generate(do_sample=False)` with HF's own cache (EOS disabled, and once more with the
    checkpoint's generation_config EOS list), and whether it agrees with the no-cache greedy run,
  * the 16 (heads) PLE n-gram table rows of every position (captured inside HF) and whether they
    equal an independent implementation of docs/model.md §6.2,
  * the QSA selection (token indices) of every query position in every attention layer.

Output: a JSON index plus a raw float32 little-endian sidecar (`<out>.bin`, byte offsets in the
index), or everything inline as base64 with --inline.

Other modes (no checkpoint needed):
  --selftest              check the docs/model.md §6.1/§15 constants with a pure-Python implementation
  --make-tiny DIR         write a tiny random checkpoint in the release layout + DIR/tokens.json

Needs: torch (2.11 tested), transformers 5.17.0 (has models/qwen4_exp), safetensors, numpy.
See tests/parity/README.md.
"""

import argparse
import base64
import glob
import json
import math
import os
import re
import sys
import tempfile
import time

# Deterministic cuBLAS; must be set before CUDA is initialised.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# ----------------------------------------------------------------------------------------------
# Pure-Python PLE hash (independent of transformers; follows docs/model.md §6.1 / §6.2)
# ----------------------------------------------------------------------------------------------
_M64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB


def splitmix64(v):
    v = (v + _GAMMA) & _M64
    v = ((v ^ (v >> 30)) * _M1) & _M64
    v = ((v ^ (v >> 27)) * _M2) & _M64
    return (v ^ (v >> 31)) & _M64


def ple_multipliers(vocab_size, ngram_size, ple_layer_index, seed):
    multiplier_max = ((1 << 63) - 1) // max(vocab_size, 1)
    half_bound = max(1, multiplier_max // 2)
    base_seed = seed + 10007 * ple_layer_index
    return [2 * (splitmix64((base_seed + _GAMMA * (j + 1)) & _M64) % half_bound) + 1 for j in range(ngram_size)]


def _is_prime(n):
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    r = math.isqrt(n)
    d = 3
    while d <= r:
        if n % d == 0:
            return False
        d += 2
    return True


def ple_head_sizes(base, ngram_size, heads_per_ngram, ple_layer_index, divisor):
    """sizes, offsets, padded table rows. Head g (global) gets the (g+1)-th prime >= base."""
    heads = (ngram_size - 1) * heads_per_ngram
    first = ple_layer_index * heads
    primes = []
    p = base - 1
    while len(primes) < first + heads:
        p += 1
        if _is_prime(p):
            primes.append(p)
    sizes = primes[first:first + heads]
    offsets, tot = [], 0
    for s in sizes:
        offsets.append(tot)
        tot += s
    padded = -(-tot // divisor) * divisor
    return sizes, offsets, padded


def ple_rows(ids, eos, mults, sizes, offsets, ngram_size, heads_per_ngram):
    """docs/model.md §6.2: rows[p] = list of (ngram_size-1)*heads_per_ngram global table rows."""
    out = []
    for p in range(len(ids)):
        u = [ids[p]]
        for s in range(1, ngram_size):
            ok = p - s >= 0 and all(ids[q] != eos for q in range(p - s, p))
            u.append(ids[p - s] if ok else eos)
        row = []
        h = u[0] * mults[0]
        for n in range(2, ngram_size + 1):
            h ^= u[n - 1] * mults[n - 1]
            base = (n - 2) * heads_per_ngram
            for k in range(heads_per_ngram):
                row.append(h % sizes[base + k] + offsets[base + k])
        out.append(row)
    return out


def selftest():
    """Checks the docs/model.md §6.1 and §15 constants with the pure-Python hash (no torch needed)."""
    m = ple_multipliers(248320, 3, 0, 1234)
    assert m == [23703573157769, 20109073645365, 8052911324071], m
    sizes, offsets, padded = ple_head_sizes(20_000_000, 3, 8, 0, 128)
    assert sizes == [20000003, 20000023, 20000033, 20000047, 20000059, 20000063, 20000069, 20000077,
                     20000081, 20000093, 20000107, 20000147, 20000153, 20000159, 20000161, 20000171], sizes
    assert offsets[-1] == 300001275 and padded == 320001536 and padded // 128 == 2500012, (offsets, padded)
    rows = ple_rows([9707, 11, 1879, 248044, 42], 248044, m, sizes, offsets, 3, 8)
    expect = {
        0: [16410909, 39682429, 55103279, 60931720, 87006904, 116506179, 131512017, 152932897, 169641436,
            182022480, 209277433, 237891023, 256841529, 277007269, 290665954, 300984276],
        1: [18158303, 36390029, 45652312, 70783524, 98191154, 114024957, 127804916, 159566246, 175132467,
            192583600, 217919476, 237199054, 259336807, 261799367, 289359313, 307699687],
        2: [6380558, 26411572, 56460672, 78566983, 94693008, 106742196, 124822692, 148942556, 164226950,
            190352573, 210933682, 238908951, 242182004, 265475238, 299910982, 312121804],
        3: [18827606, 27700912, 56521518, 65780303, 81132822, 100518937, 120474864, 142052741, 163793416,
            184135950, 219854666, 227756662, 248975183, 271245822, 285569892, 318943450],
        4: [4064167, 21428206, 43851727, 63435096, 89826284, 106088217, 121229381, 156147803, 175176707,
            188463481, 216828809, 228933352, 248448227, 269188956, 283041664, 314347972],
    }
    for p, r in expect.items():
        assert rows[p] == r, (p, rows[p], r)
    print("selftest: docs/model.md §6.1 multipliers/sizes/offsets/padding and 17 n-gram rows reproduced")


# ----------------------------------------------------------------------------------------------
# Torch part
# ----------------------------------------------------------------------------------------------
def _torch():
    import torch
    return torch


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]

IGNORED_PATTERNS = [
    # documented: MTP head and vision tower are out of scope (HF ignores ^mtp.* / ^model.visual.*)
    (re.compile(r"^mtp\."), "mtp"),
    (re.compile(r"^model\.mtp\."), "mtp"),
    (re.compile(r"^model\.language_model\.mtp\."), "mtp"),
    (re.compile(r"^model\.visual\."), "visual"),
    # runtime-only extras seen in some ports' loaders (vLLM skips them)
    (re.compile(r"\.hashstats_[^.]*$"), "ple-hashstats"),
    (re.compile(r"\.token_lookup$"), "ple-token_lookup"),
]

EXPERT_RE = re.compile(
    r"^(?P<prefix>model\.layers\.\d+\.mlp\.experts)\.(?P<e>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\."
    r"(?P<field>weight|weight_scale|weight_scale_2|input_scale|weight_scale_inv)$")
SHARD_RE = re.compile(r"^(?P<prefix>.*\.ple_embedding\.ngram_embedding)\.shard_(?P<s>\d+)\.weight$")
HASH_BUFFERS = ("layer_multipliers", "ngram_heads_vocab_sizes", "ngram_heads_offsets")


def normalize_key(k):
    """Checkpoint key -> Qwen4ExpForCausalLM state_dict key (None: not a text-model key)."""
    if k.startswith("model.language_model."):
        return "model." + k[len("model.language_model."):]
    if k.startswith("model.") or k.startswith("lm_head."):
        return k
    return None


class Checkpoint:
    def __init__(self, directory):
        from safetensors import safe_open
        self.dir = directory
        files = sorted(glob.glob(os.path.join(directory, "*.safetensors")))
        if not files:
            raise SystemExit(f"no *.safetensors in {directory}")
        self.where = {}
        self.handles = {}
        for f in files:
            h = safe_open(f, framework="pt", device="cpu")
            self.handles[f] = h
            for k in h.keys():
                if k in self.where:
                    raise SystemExit(f"tensor {k} present in two files: {self.where[k]} and {f}")
                self.where[k] = f
        self.files = files

    def keys(self):
        return list(self.where)

    def get(self, k):
        return self.handles[self.where[k]].get_tensor(k)


def dequant_linear(fields, key_for_msg):
    """fields: dict field->tensor for one linear. Returns float64 [N, K]."""
    torch = _torch()
    w = fields["weight"]
    if w.dtype == torch.uint8 and "weight_scale" in fields:
        # ModelOpt NVFP4: two E2M1 codes per byte along K, low nibble first; e4m3 scale per 16; fp32 global
        s = fields["weight_scale"]
        g = fields.get("weight_scale_2")
        if g is None:
            raise SystemExit(f"{key_for_msg}: NVFP4 weight without weight_scale_2")
        if s.dtype != torch.float8_e4m3fn:
            raise SystemExit(f"{key_for_msg}: weight_scale dtype {s.dtype}, expected float8_e4m3fn")
        n, kh = w.shape
        k = kh * 2
        if tuple(s.shape) != (n, k // 16):
            raise SystemExit(f"{key_for_msg}: weight {tuple(w.shape)} / weight_scale {tuple(s.shape)} mismatch")
        sb = s.view(torch.uint8)
        if bool(((sb & 0x7F) == 0x7F).any()):
            raise SystemExit(f"{key_for_msg}: NaN in e4m3 weight_scale")
        codes = torch.stack([w & 0x0F, w >> 4], dim=-1).reshape(n, k).long()
        lut = torch.tensor(E2M1, dtype=torch.float64)
        vals = lut[codes]
        sf = s.float().double().repeat_interleave(16, dim=1)
        gf = float(g.float().reshape(-1)[0])
        return vals * sf * gf  # exact in float64 (<= 30 significant bits)
    if w.dtype == torch.float8_e4m3fn and "weight_scale_inv" in fields:
        # block FP8 (official FP8 release): scale_inv per 128x128 block
        si = fields["weight_scale_inv"].double()
        n, k = w.shape
        bn = -(-n // si.shape[0])
        bk = -(-k // si.shape[1])
        full = si.repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]
        return w.float().double() * full
    if w.dtype == torch.float8_e4m3fn and "weight_scale" in fields:
        return w.float().double() * float(fields["weight_scale"].float().reshape(-1)[0])
    if w.is_floating_point() and w.dtype != torch.float8_e4m3fn:
        return w.double()
    raise SystemExit(f"{key_for_msg}: unsupported expert weight format {w.dtype} fields={sorted(fields)}")


def load_config(ckpt_dir, indexer_budget=None):
    from transformers.models.qwen4_exp.configuration_qwen4_exp import Qwen4ExpTextConfig
    with open(os.path.join(ckpt_dir, "config.json")) as f:
        raw = json.load(f)
    text = dict(raw["text_config"]) if "text_config" in raw else dict(raw)
    notes = []
    for k in ("eos_token_id", "bos_token_id", "pad_token_id"):
        if text.get(k) is None and raw.get(k) is not None:
            text[k] = raw[k]
            notes.append(f"{k} taken from the outer config")
    for k in ("quantization_config", "architectures", "auto_map"):
        text.pop(k, None)
    text.pop("model_type", None)
    if indexer_budget is not None:
        notes.append(f"indexer_budget overridden: {text.get('indexer_budget')} -> {indexer_budget}")
        text["indexer_budget"] = int(indexer_budget)
    cfg = Qwen4ExpTextConfig.from_dict(text)
    gen = {}
    gp = os.path.join(ckpt_dir, "generation_config.json")
    if os.path.exists(gp):
        with open(gp) as f:
            gen = json.load(f)
    return raw, cfg, gen, notes


def build_state_dict(ck, model, dtype, ple_bf16_round, report):
    torch = _torch()
    target = model.state_dict()
    new = {}
    consumed = set()
    ignored = {}
    experts = {}  # prefix -> e -> proj -> field -> tensor key
    shards = {}  # prefix -> s -> key
    scales = {}  # prefix -> key of ngram_embedding.weight_scale
    direct = {}  # target name -> ckpt key

    for k in ck.keys():
        tag = next((t for rx, t in IGNORED_PATTERNS if rx.search(k)), None)
        if tag:
            ignored[tag] = ignored.get(tag, 0) + 1
            consumed.add(k)
            continue
        nk = normalize_key(k)
        if nk is None:
            continue  # reported as unexpected below
        m = EXPERT_RE.match(nk)
        if m:
            experts.setdefault(m["prefix"], {}).setdefault(int(m["e"]), {}).setdefault(m["proj"], {})[m["field"]] = k
            continue
        m = SHARD_RE.match(nk)
        if m:
            shards.setdefault(m["prefix"], {})[int(m["s"])] = k
            continue
        if nk.endswith(".ple_embedding.ngram_embedding.weight_scale"):
            scales[nk[: -len(".weight_scale")]] = k
            continue
        direct[nk] = k

    # --- routed experts -> fused [E, 2I, H] gate_up_proj and [E, H, I] down_proj
    nvfp4 = {"layers": 0, "experts": 0, "gate_up_scale2_differs": 0, "formats": set()}
    for prefix, per_e in experts.items():
        gu_name, dn_name = prefix + ".gate_up_proj", prefix + ".down_proj"
        if gu_name not in target or dn_name not in target:
            raise SystemExit(f"expert tensors under {prefix} but model has no {gu_name}")
        E = target[gu_name].shape[0]
        if sorted(per_e) != list(range(E)):
            raise SystemExit(f"{prefix}: experts {sorted(per_e)[:5]}... do not cover 0..{E - 1}")
        gu, dn = [], []
        for e in range(E):
            mats = {}
            for proj in ("gate_proj", "up_proj", "down_proj"):
                if proj not in per_e[e]:
                    raise SystemExit(f"{prefix}.{e}: missing {proj}")
                fk = per_e[e][proj]
                fields = {f: ck.get(key) for f, key in fk.items()}
                consumed.update(fk.values())  # input_scale is consumed: unused by W4A16 dequantization
                nvfp4["formats"].add(str(fields["weight"].dtype))
                mats[proj] = dequant_linear(fields, f"{prefix}.{e}.{proj}")
            if "weight_scale_2" in per_e[e]["gate_proj"]:
                g2 = ck.get(per_e[e]["gate_proj"]["weight_scale_2"]).float().reshape(-1)[0]
                u2 = ck.get(per_e[e]["up_proj"]["weight_scale_2"]).float().reshape(-1)[0]
                nvfp4["gate_up_scale2_differs"] += int(bool(g2 != u2))
            gu.append(torch.cat([mats["gate_proj"], mats["up_proj"]], dim=0))  # rows [0:I) gate, [I:2I) up
            dn.append(mats["down_proj"])
        new[gu_name] = torch.stack(gu).to(dtype)
        new[dn_name] = torch.stack(dn).to(dtype)
        nvfp4["layers"] += 1
        nvfp4["experts"] += E
    nvfp4["formats"] = sorted(nvfp4["formats"])
    report["experts"] = nvfp4

    # --- PLE n-gram table: concatenate shards in numeric shard order, apply the FP8 scale
    ple = []
    for prefix, per_s in shards.items():
        name = prefix + ".weight"
        if name not in target:
            raise SystemExit(f"PLE shards {prefix}.shard_* but model has no {name}")
        order = sorted(per_s)
        if order != list(range(len(order))):
            raise SystemExit(f"{prefix}: shard indices not contiguous: {order[:8]}...")
        parts = [ck.get(per_s[s]) for s in order]
        consumed.update(per_s.values())
        dt = parts[0].dtype
        if any(p.dtype != dt for p in parts) or len({p.shape[0] for p in parts}) != 1:
            raise SystemExit(f"{prefix}: shards differ in dtype or row count")
        table = torch.cat(parts, dim=0)
        info = {"module": prefix, "shards": len(parts), "rows": table.shape[0], "dtype": str(dt)}
        if tuple(table.shape) != tuple(target[name].shape):
            raise SystemExit(f"{prefix}: table {tuple(table.shape)} != model {tuple(target[name].shape)}")
        if dt == torch.float8_e4m3fn:
            if prefix not in scales:
                raise SystemExit(f"{prefix}: FP8 table without ngram_embedding.weight_scale")
            sc = ck.get(scales[prefix])
            consumed.add(scales[prefix])
            scv = float(sc.float().reshape(-1)[0])
            info["weight_scale"] = scv
            info["weight_scale_dtype"] = str(sc.dtype)
            t = table.float().double() * scv  # exact: 4 x 8 significant bits
            if ple_bf16_round:
                t = t.to(torch.bfloat16)
            info["bf16_rounded_after_scale"] = bool(ple_bf16_round)
            new[name] = t.to(dtype)
        else:
            if prefix in scales:
                raise SystemExit(f"{prefix}: weight_scale present for a non-FP8 table ({dt})")
            new[name] = table.to(dtype)
        ple.append(info)
    for prefix, k in scales.items():
        if prefix not in shards:
            # unsharded table + scale
            name = prefix + ".weight"
            if name not in direct:
                raise SystemExit(f"{k}: weight_scale without an n-gram table")
            tk = direct.pop(name)
            t = ck.get(tk)
            if t.dtype != torch.float8_e4m3fn:
                raise SystemExit(f"{k}: weight_scale present for a non-FP8 table ({t.dtype})")
            sc = float(ck.get(k).float().reshape(-1)[0])
            v = t.float().double() * sc
            new[name] = (v.to(torch.bfloat16) if ple_bf16_round else v).to(dtype)
            consumed.update([k, tk])
            ple.append({"module": prefix, "shards": 0, "rows": t.shape[0], "dtype": str(t.dtype),
                        "weight_scale": sc, "bf16_rounded_after_scale": bool(ple_bf16_round)})
    report["ple_tables"] = ple

    # --- hash buffers: must be int64 and equal to the values the model computes
    hashes = []
    for nk, k in list(direct.items()):
        if nk.rsplit(".", 1)[-1] in HASH_BUFFERS:
            t = ck.get(k)
            consumed.add(k)
            del direct[nk]
            if nk not in target:
                raise SystemExit(f"hash buffer {k} has no model counterpart {nk}")
            if t.dtype != torch.int64:
                raise SystemExit(f"{k}: dtype {t.dtype}, must be int64 (float conversion corrupts 45-bit values)")
            mine = target[nk]
            eq = tuple(t.shape) == tuple(mine.shape) and torch.equal(t.cpu(), mine.cpu())
            hashes.append({"name": nk, "equal_to_model_computed": bool(eq), "checkpoint": t.tolist(),
                           "model": mine.tolist()})
            if not eq:
                raise SystemExit(f"hash buffer {nk}: checkpoint {t.tolist()} != model-computed {mine.tolist()}")
            new[nk] = t
    report["hash_buffers"] = hashes

    # --- everything else: plain float tensors
    for nk, k in direct.items():
        if nk not in target:
            continue  # reported as unexpected
        t = ck.get(k)
        consumed.add(k)
        if t.dtype == torch.float8_e4m3fn or t.dtype == torch.uint8:
            raise SystemExit(f"{k}: quantized tensor ({t.dtype}) outside the experts / PLE table")
        if tuple(t.shape) != tuple(target[nk].shape):
            raise SystemExit(f"{k}: shape {tuple(t.shape)} != model {nk} {tuple(target[nk].shape)}")
        new[nk] = t.to(dtype) if t.is_floating_point() else t

    for nk in target:
        if nk in new or not nk.endswith(tuple("." + b for b in HASH_BUFFERS)):
            continue
        report.setdefault("hash_buffers_missing_in_checkpoint", []).append(nk)
        new[nk] = target[nk]  # HF would keep the computed values (persistent buffer absent from file)

    if "lm_head.weight" not in new and getattr(model.config, "tie_word_embeddings", False):
        new["lm_head.weight"] = new["model.embed_tokens.weight"]
        report["lm_head"] = "tied to embed_tokens"

    unexpected = sorted(set(ck.keys()) - consumed)
    missing = sorted(set(target) - set(new))
    report["ignored"] = ignored
    report["checkpoint_tensors"] = len(ck.keys())
    if unexpected:
        raise SystemExit(f"unexpected checkpoint tensors ({len(unexpected)}): {unexpected[:20]}")
    if missing:
        raise SystemExit(f"model tensors not filled ({len(missing)}): {missing[:20]}")
    for nk, t in new.items():
        if tuple(t.shape) != tuple(target[nk].shape):
            raise SystemExit(f"{nk}: built {tuple(t.shape)} != model {tuple(target[nk].shape)}")
    return new


class Blob:
    def __init__(self, inline):
        self.inline = inline
        self.parts = []
        self.size = 0

    def add(self, t):
        import numpy as np
        a = t.detach().to("cpu").float().contiguous().numpy().astype("<f4", copy=False)
        b = a.tobytes()
        if self.inline:
            return {"dtype": "float32", "shape": list(a.shape), "b64": base64.b64encode(b).decode()}
        ref = {"dtype": "float32", "shape": list(a.shape), "offset": self.size, "nbytes": len(b)}
        self.parts.append(b)
        self.size += len(b)
        return ref

    def write(self, path):
        with open(path, "wb") as f:
            for b in self.parts:
                f.write(b)


def run_reference(args):
    torch = _torch()
    import transformers
    from transformers.models.qwen4_exp import modeling_qwen4_exp as mq

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.use_deterministic_algorithms(True, warn_only=True)

    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]

    raw, cfg, gencfg, notes = load_config(args.checkpoint, args.indexer_budget)
    with open(args.tokens) as f:
        cases = json.load(f)
    if isinstance(cases, dict):
        cases = cases.get("cases", [])

    torch.manual_seed(0)
    t0 = time.time()
    # Construct directly in the target dtype, like from_pretrained(dtype=...): the non-persistent RoPE inv_freq
    # buffer stays float32 either way.
    model = mq.Qwen4ExpForCausalLM._from_config(
        cfg, dtype=dtype, attn_implementation=args.attn_impl, experts_implementation=args.experts_impl)
    model.eval()
    report = {"config_notes": notes}
    ck = Checkpoint(args.checkpoint)
    sd = build_state_dict(ck, model, dtype, args.ple_bf16_round, report)
    res = model.load_state_dict(sd, strict=True)
    report["load_state_dict"] = {"missing": list(res.missing_keys), "unexpected": list(res.unexpected_keys)}
    model = model.to(device)
    report["load_seconds"] = round(time.time() - t0, 2)

    text = model.config
    eos = text.eos_token_id[0] if isinstance(text.eos_token_id, list) else text.eos_token_id
    gen_eos = gencfg.get("eos_token_id", text.eos_token_id)
    gen_eos_list = gen_eos if isinstance(gen_eos, list) else ([gen_eos] if gen_eos is not None else [])

    # Capture PLE n-gram rows and QSA selections inside the HF forward.
    captured = {"ngram": {}, "qsa": {}}
    hooks = []
    ple_mods = {}
    attn_layers = []
    for i, layer in enumerate(model.model.layers):
        if layer.ple is not None:
            ple_mods[i] = layer.ple.ple_embedding

            def ng_hook(mod, inp, out, i=i):
                captured["ngram"][i] = inp[0].detach().to("cpu")
            hooks.append(layer.ple.ple_embedding.ngram_embedding.register_forward_hook(ng_hook))
        if layer.layer_type != "linear_attention":
            attn_layers.append(i)

            def qsa_hook(mod, inp, out, i=i):
                captured["qsa"][i] = out.detach().to("cpu")
                if inp[3] is None:  # full forward without cache: recompute the block scores for the report
                    captured.setdefault("qsa_scores", {})[i] = qsa_block_scores(mod, inp[0], inp[1], inp[2])
            hooks.append(layer.self_attn.indexer.register_forward_hook(qsa_hook))

    blob = Blob(args.inline)

    def fwd(ids):
        x = torch.tensor([ids], dtype=torch.long, device=device)
        with torch.no_grad():
            out = model(input_ids=x, use_cache=False)
        return out.logits[0].float()

    out_cases = []
    for case in cases:
        name, ids, N = case["name"], [int(t) for t in case["ids"]], int(case.get("generate", 0))
        if not ids:
            raise SystemExit(f"case {name}: empty ids")
        if max(ids) >= text.vocab_size or min(ids) < 0:
            raise SystemExit(f"case {name}: token id out of range")
        rec = {"name": name, "ids": ids, "T": len(ids), "generate": N}
        captured["ngram"].clear()
        captured["qsa"].clear()
        logits = fwd(ids)
        rec["logits_all"] = blob.add(logits)
        rec["logits_last"] = blob.add(logits[-1])
        rec["argmax_all"] = logits.argmax(-1).tolist()

        # PLE rows captured in HF vs. independent docs/model.md §6.2 implementation
        ng = {}
        for li, emb in ple_mods.items():
            hf_rows = captured["ngram"][li][0].tolist()
            mine = ple_rows(ids, eos, emb.layer_multipliers.tolist(), emb.ngram_heads_vocab_sizes.tolist(),
                            emb.ngram_heads_offsets.tolist(), emb.ngram_size, emb.heads_per_ngram)
            ng[str(li)] = {"rows": hf_rows, "match_independent": hf_rows == mine}
        rec["ple_ngram_rows"] = ng
        # QSA: selected key positions per query (mask is [b, 1, q, kv])
        qsa = {}
        for li in attn_layers:
            m = captured["qsa"][li]
            m = m if m.dtype == torch.bool else (m == 0)
            qsa[str(li)] = [torch.nonzero(m[0, 0, q]).flatten().tolist() for q in range(m.shape[2])]
        rec["qsa_selected"] = qsa
        # Block scores, top-k margin (score[k-1] - score[k] of the sorted scores; tiny or 0 = the selection
        # depends on tie order / rounding) and a check that the recomputation selects what HF selected.
        qs = {}
        for li in attn_layers:
            sc = captured.get("qsa_scores", {}).get(li)
            if sc is None:
                continue
            ent = {"scores": [], "topk_margin": [], "recompute_matches_hf": True, "ambiguous_queries": []}
            for q, (scores, blocks, sel) in enumerate(sc):
                ent["scores"].append([float(v) for v in scores])
                margin = None
                if len(scores) > model.config.indexer_budget // model.config.indexer_compress_ratio:
                    kk = model.config.indexer_budget // model.config.indexer_compress_ratio
                    srt = sorted((float(v) for v in scores), reverse=True)
                    margin = srt[kk - 1] - srt[kk]
                    if margin <= 1e-5 * max(1.0, abs(srt[kk - 1])):
                        ent["ambiguous_queries"].append(q)
                ent["topk_margin"].append(margin)
                if sorted(sel) != sorted(qsa[str(li)][q]):
                    ent["recompute_matches_hf"] = False
            qs[str(li)] = ent
        rec["qsa_scores"] = qs
        captured.pop("qsa_scores", None)

        # Greedy continuation by repeated full forwards (no cache)
        seq = list(ids)
        steps, toks = [logits[-1]], []
        for k in range(N):
            tok = int(steps[-1].argmax())
            toks.append(tok)
            seq.append(tok)
            if k + 1 < N:
                steps.append(fwd(seq)[-1])
        rec["greedy_nocache"] = {
            "tokens": toks,
            "step_logits": blob.add(torch.stack(steps[:N])) if N else None,
            "first_eos_index": next((j for j, t in enumerate(toks) if t in gen_eos_list), None),
        }

        # Teacher-forced cached decode with HF DynamicCache vs the no-cache step logits
        cd = {"error": None}
        if N and not args.no_cache_check:
            try:
                with torch.no_grad():
                    x = torch.tensor([ids], dtype=torch.long, device=device)
                    out = model(input_ids=x, use_cache=True)
                    cache = out.past_key_values
                    diffs = [float((out.logits[0, -1].float() - steps[0]).abs().max())]
                    agree = [int(out.logits[0, -1].argmax()) == toks[0]]
                    for k in range(1, N):
                        xt = torch.tensor([[toks[k - 1]]], dtype=torch.long, device=device)
                        out = model(input_ids=xt, past_key_values=cache, use_cache=True)
                        lg = out.logits[0, -1].float()
                        diffs.append(float((lg - steps[k]).abs().max()))
                        agree.append(int(lg.argmax()) == toks[k])
                cd.update({"max_abs_diff_per_step": diffs, "argmax_agree_per_step": agree,
                           "max_abs_diff": max(diffs), "all_argmax_agree": all(agree)})
            except Exception as e:  # report, do not die: HF cache correctness is what is being checked
                cd["error"] = f"{type(e).__name__}: {e}"
        rec["cached_decode"] = cd

        # Two-piece prefill with HF's cache (chunked-prefill continuation) vs the full no-cache forward
        sp = {"error": None}
        if len(ids) >= 2 and not args.no_cache_check:
            try:
                h = len(ids) // 2
                with torch.no_grad():
                    o1 = model(input_ids=torch.tensor([ids[:h]], device=device), use_cache=True)
                    o2 = model(input_ids=torch.tensor([ids[h:]], device=device), past_key_values=o1.past_key_values,
                               use_cache=True)
                both = torch.cat([o1.logits[0], o2.logits[0]], dim=0).float()
                sp.update({"split_at": h, "max_abs_diff": float((both - logits).abs().max()),
                           "argmax_agree": bool((both.argmax(-1) == logits.argmax(-1)).all())})
            except Exception as e:
                sp["error"] = f"{type(e).__name__}: {e}"
        rec["split_prefill"] = sp

        # HF generate with its own cache
        for key, eos_setting in (("generate", None), ("generate_with_eos", gen_eos_list or None)):
            g = {"error": None, "eos_token_id": eos_setting}
            if N and not args.no_generate and not (key == "generate_with_eos" and not gen_eos_list):
                try:
                    model.generation_config.eos_token_id = eos_setting
                    model.generation_config.pad_token_id = None
                    model.generation_config.bos_token_id = None
                    x = torch.tensor([ids], dtype=torch.long, device=device)
                    with torch.no_grad():
                        out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=N,
                                             do_sample=False, num_beams=1, use_cache=True)
                    gt = out[0, len(ids):].tolist()
                    g["tokens"] = gt
                    if eos_setting is None:
                        g["agrees_with_nocache_greedy"] = gt == toks
                    else:
                        stop = rec["greedy_nocache"]["first_eos_index"]
                        g["agrees_with_nocache_greedy_truncated_at_eos"] = gt == (toks if stop is None else toks[:stop + 1])
                except Exception as e:
                    g["error"] = f"{type(e).__name__}: {e}"
            rec[key] = g
        out_cases.append(rec)
        print(f"case {name}: T={len(ids)} greedy={toks} cached_max_diff={cd.get('max_abs_diff')} "
              f"split_prefill_max_diff={sp.get('max_abs_diff')} err={cd['error'] or sp['error']} "
              f"generate_agree={rec['generate'].get('agrees_with_nocache_greedy')} "
              f"ple_rows_ok={all(v['match_independent'] for v in ng.values())} "
              f"qsa_ambiguous={ {k: v['ambiguous_queries'] for k, v in rec['qsa_scores'].items()} } "
              f"qsa_recompute_ok={all(v['recompute_matches_hf'] for v in rec['qsa_scores'].values())}", flush=True)

    for h in hooks:
        h.remove()

    hf_loader = None
    if args.check_hf_loader:
        hf_loader = check_hf_loader(args.checkpoint, raw, model, ck)

    try:
        import fla  # noqa: F401
        fla_ok = True
    except Exception:
        fla_ok = False
    meta = {
        "format": "q38-hf-reference-v1",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": args.dtype,
        "attn_implementation": model.config._attn_implementation,
        "experts_implementation": getattr(model.config, "_experts_implementation", None),
        "flash_linear_attention_installed": fla_ok,
        "gdn_kernels": "transformers torch fallbacks (torch_chunk_gated_delta_rule / torch_recurrent_gated_delta_rule)"
        if not fla_ok else "fla",
        "ple_bf16_round": bool(args.ple_bf16_round),
        "checkpoint": os.path.abspath(args.checkpoint),
        "eos_token_id_ple": eos,
        "generation_eos_token_ids": gen_eos_list,
        "config": {k: getattr(text, k) for k in (
            "vocab_size", "hidden_size", "num_hidden_layers", "layer_types", "num_attention_heads",
            "num_key_value_heads", "head_dim", "rope_parameters", "linear_num_key_heads", "linear_num_value_heads",
            "linear_key_head_dim", "linear_value_head_dim", "num_experts", "num_experts_per_tok",
            "moe_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob", "hc_count", "hc_lowrank",
            "ple_layer_ids", "ple_embed_dim", "ngram_size", "heads_per_ngram", "ngram_vocab_size_base",
            "make_ngram_vocab_size_divisible_by", "split_ngram_parts", "seed", "indexer_n_heads",
            "indexer_head_dim", "indexer_budget", "indexer_compress_ratio", "output_gate_type", "rms_norm_eps",
            "eos_token_id", "tie_word_embeddings")},
        "created_unix": int(time.time()),
    }
    doc = {"meta": meta, "load_report": report, "hf_loader_check": hf_loader, "cases": out_cases}
    if not args.inline:
        bin_path = os.path.splitext(args.out)[0] + ".bin"
        blob.write(bin_path)
        doc["blob"] = os.path.basename(bin_path)
        doc["blob_bytes"] = blob.size
    with open(args.out, "w") as f:
        json.dump(doc, f, default=str)
    print(f"wrote {args.out}" + ("" if args.inline else f" and {doc['blob']} ({blob.size} bytes)"))
    bad = [c["name"] for c in out_cases if not all(v["match_independent"] for v in c["ple_ngram_rows"].values())]
    if bad:
        print(f"WARNING: PLE rows differ from docs/model.md §6.2 for cases {bad}")
    return doc


def qsa_block_scores(mod, hidden_states, position_embeddings, attention_mask):
    """Recompute, with the indexer's own modules and HF's apply_rotary_pos_emb, the per-query block scores of
    Qwen4ExpTextQSAIndexer.forward (no-cache case). Returns [(scores[nb], block_starts, selected_tokens)] per query."""
    torch = _torch()
    from transformers.models.qwen4_exp.modeling_qwen4_exp import apply_rotary_pos_emb
    with torch.no_grad():
        b, T, _ = hidden_states.shape
        di, r = mod.index_head_dim, mod.compress_ratio
        full_cos, full_sin = position_embeddings
        qk = mod.index_qk_proj(hidden_states)
        q, k = torch.split(qk, [mod.index_n_heads * di, mod.index_kv_heads * di], dim=-1)
        q = mod.q_layernorm(q.reshape(b, T, -1, di))
        q = apply_rotary_pos_emb(q, cos=full_cos[:, -T:, :], sin=full_sin[:, -T:, :], unsqueeze_dim=2)
        raw = k.reshape(b, T, -1, di).squeeze(2)
        vis = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
        res = []
        for qi in range(T):
            idx = torch.nonzero(vis[0, 0, qi]).flatten()
            nb = idx.shape[0] // r
            if nb == 0:
                res.append(([], [], idx.tolist()))
                continue
            blk = idx[: nb * r].view(nb, r)
            pooled = raw[0].index_select(0, blk.flatten()).view(nb, r, di).float().mean(1).to(raw.dtype)
            pooled = mod.k_layernorm(pooled)
            starts = blk[:, 0]
            kb = apply_rotary_pos_emb(pooled.unsqueeze(1), cos=full_cos[0].index_select(0, starts),
                                      sin=full_sin[0].index_select(0, starts)).squeeze(1)
            s = torch.matmul(q[0, qi].float(), kb.float().transpose(-1, -2)).transpose(-1, -2)
            s = torch.relu(s).sum(dim=-1) / math.sqrt(di)
            top = s.topk(min(mod.block_topk, nb), dim=0).indices
            sel = blk.index_select(0, top).flatten().tolist() + idx[nb * r:].tolist()
            res.append((s.cpu().tolist(), starts.cpu().tolist(), sel))
        return res


def check_hf_loader(ckpt_dir, raw_cfg, model, ck):
    """Round-trip through transformers' own from_pretrained: write the dequantized float32 weights in the
    un-quantized release layout (model.language_model.*, per-expert experts.{e}.{gate,up,down}_proj.weight,
    ngram_embedding.shard_{s}.weight) and compare every tensor HF builds with ours."""
    torch = _torch()
    from safetensors.torch import save_file
    from transformers.models.qwen4_exp.modeling_qwen4_exp import Qwen4ExpForCausalLM
    sd = {k: v.detach().to("cpu").float() if v.is_floating_point() else v.detach().to("cpu")
          for k, v in model.state_dict().items()}
    out = {}
    n_shards = {}
    for k in ck.keys():
        m = SHARD_RE.match(normalize_key(k) or "")
        if m:
            n_shards[m["prefix"]] = n_shards.get(m["prefix"], 0) + 1
    for k, v in sd.items():
        base = "model.language_model." + k[len("model."):] if k.startswith("model.") else k
        if k.endswith(".mlp.experts.gate_up_proj"):
            p = base[: -len("gate_up_proj")]
            I = v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"{p}{e}.gate_proj.weight"] = v[e, :I].contiguous()
                out[f"{p}{e}.up_proj.weight"] = v[e, I:].contiguous()
        elif k.endswith(".mlp.experts.down_proj"):
            p = base[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{p}{e}.down_proj.weight"] = v[e].contiguous()
        elif k.endswith(".ple_embedding.ngram_embedding.weight"):
            p = base[: -len(".weight")]
            n = n_shards.get(k[: -len(".weight")], 1)
            for s, chunk in enumerate(torch.chunk(v, n, dim=0)):
                out[f"{p}.shard_{s}.weight"] = chunk.contiguous()
        else:
            out[base] = v.contiguous()
    res = {"error": None}
    try:
        with tempfile.TemporaryDirectory() as td:
            cfg = dict(raw_cfg)
            cfg.pop("quantization_config", None)
            tc = dict(cfg.get("text_config", cfg))
            tc.pop("quantization_config", None)
            tc["indexer_budget"] = model.config.indexer_budget
            tc["dtype"] = "float32"
            if "text_config" in cfg:
                cfg["text_config"] = tc
            else:
                cfg = tc
            with open(os.path.join(td, "config.json"), "w") as f:
                json.dump(cfg, f)
            save_file(out, os.path.join(td, "model.safetensors"))
            hf, info = Qwen4ExpForCausalLM.from_pretrained(td, dtype=torch.float32, output_loading_info=True)
            hsd = hf.state_dict()
            diff = [k for k in sd if k not in hsd or hsd[k].shape != sd[k].shape or not torch.equal(hsd[k].cpu(), sd[k])]
            res.update({
                "missing_keys": sorted(info.get("missing_keys", [])),
                "unexpected_keys": sorted(info.get("unexpected_keys", [])),
                "mismatched_keys": [str(x) for x in info.get("mismatched_keys", [])],
                "tensors_compared": len(sd),
                "tensors_differing": diff[:50],
                "identical": not diff,
            })
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"
    print(f"hf loader round-trip: {res}")
    return res


# ----------------------------------------------------------------------------------------------
# Tiny random checkpoint in the NVFP4 release layout (docs/model.md §2 / §14)
# ----------------------------------------------------------------------------------------------
def make_tiny(out_dir, seed=1):
    torch = _torch()
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(seed)

    def rn(*shape, std=1.0):
        return torch.randn(*shape, generator=g) * std

    V, H, L = 512, 64, 4
    S, R = 4, 16
    Hq, Hkv, dh = 4, 2, 32
    Hk, Hv, dk, dv, K = 2, 6, 16, 16, 4
    E, topk, I, Is = 8, 2, 32, 32
    Hi, di, ratio, budget = 2, 16, 4, 8
    N, hpn, D, base, div, parts = 3, 2, 64, 1000, 128, 4
    eos, im_end = 511, 510
    W = S * H
    text = {
        "model_type": "qwen4_exp_text", "vocab_size": V, "hidden_size": H, "num_hidden_layers": L,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        "full_attention_interval": 4, "num_attention_heads": Hq, "num_key_value_heads": Hkv, "head_dim": dh,
        "attention_bias": False, "hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                            "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        "partial_rotary_factor": 0.25,
        "linear_conv_kernel_dim": K, "linear_num_key_heads": Hk, "linear_num_value_heads": Hv,
        "linear_key_head_dim": dk, "linear_value_head_dim": dv, "mamba_ssm_dtype": "float32",
        "output_gate_type": "sigmoid", "num_experts": E, "num_experts_per_tok": topk,
        "moe_intermediate_size": I, "shared_expert_intermediate_size": Is, "router_aux_loss_coef": 0.001,
        "hc_count": S, "hc_lowrank": R, "ple_layer_ids": [2], "ple_embed_dim": D, "ple_conv_kernel_size": 4,
        "ngram_size": N, "heads_per_ngram": hpn, "ngram_vocab_size_base": base,
        "make_ngram_vocab_size_divisible_by": div, "split_ngram_parts": parts,
        "indexer_n_heads": Hi, "indexer_kv_heads": 1, "indexer_head_dim": di, "indexer_budget": budget,
        "indexer_compress_ratio": ratio, "tie_word_embeddings": False, "bos_token_id": eos,
        "eos_token_id": eos, "pad_token_id": None, "dtype": "bfloat16",
        "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False,
        "ple_embedding_dtype": "float8_e4m3fn",
    }
    cfg = {"architectures": ["Qwen4ExpForConditionalGeneration"], "model_type": "qwen4_exp", "text_config": text,
           "vision_config": {"model_type": "qwen4_exp_vision", "depth": 1, "hidden_size": 32, "intermediate_size": 64,
                             "num_heads": 2, "out_hidden_size": H},
           "image_token_id": 500, "video_token_id": 501, "vision_start_token_id": 502, "vision_end_token_id": 503,
           "tie_word_embeddings": False,
           "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                   "config_groups": {"group_0": {
                                       "weights": {"num_bits": 4, "type": "float", "group_size": 16},
                                       "input_activations": {"num_bits": 4, "type": "float", "group_size": 16}}},
                                   "ignore": ["model.embed_tokens", "mtp.*", "*.self_attn.*", "*.linear_attn.*",
                                              "*.mlp.gate*", "*.mlp.shared_expert.*", "*hyper_connection*",
                                              "*.ple.*", "lm_head"]}}
    P = "model.language_model."
    bf = {}  # BF16 backbone (+ int64 buffers, F32 A_log / norm)

    def put(name, t, dtype=torch.bfloat16):
        bf[name] = t.to(dtype).contiguous()

    def lin(o, i):
        return rn(o, i, std=1.0 / math.sqrt(i))

    def hc(pfx, inject=True):
        put(pfx + "hc_norm.weight", rn(W, std=0.1))
        put(pfx + "input_mix_weight_down.weight", lin(R, W))
        put(pfx + "input_mix_weight_up.weight", lin(W, R))
        if inject:
            put(pfx + "block_inject_weight.weight", lin(S, W))

    put(P + "embed_tokens.weight", rn(V, H))
    put("lm_head.weight", lin(V, H))
    hc(P + "hyper_connection_mixer.", inject=False)
    nv = {}

    def nvfp4(name, n, k):
        codes = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
        nv[name + ".weight"] = (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous()
        sc = (torch.rand(n, k // 16, generator=g) * 1.5 + 0.5) * (2.0 ** -4)
        nv[name + ".weight_scale"] = sc.to(torch.float8_e4m3fn)
        gsc = torch.rand((), generator=g) * 0.3 + 0.05
        nv[name + ".weight_scale_2"] = torch.tensor(float(gsc) / math.sqrt(k / 16), dtype=torch.float32)
        nv[name + ".input_scale"] = torch.tensor(0.01, dtype=torch.float32)
        return nv[name + ".weight_scale_2"]

    for i in range(L):
        Li = f"{P}layers.{i}."
        hc(Li + "attn_hyper_connection.")
        hc(Li + "mlp_hyper_connection.")
        if text["layer_types"][i] == "linear_attention":
            a = Li + "linear_attn."
            put(a + "in_proj_qkv.weight", lin(2 * Hk * dk + Hv * dv, H))
            put(a + "in_proj_z.weight", lin(Hv * dv, H))
            put(a + "in_proj_b.weight", lin(Hv, H))
            put(a + "in_proj_a.weight", lin(Hv, H))
            put(a + "conv1d.weight", rn(2 * Hk * dk + Hv * dv, 1, K, std=0.4))
            put(a + "dt_bias", rn(Hv, std=0.5))
            put(a + "A_log", torch.log(torch.rand(Hv, generator=g) * 15 + 1), torch.float32)
            put(a + "norm.weight", 1 + rn(dv, std=0.1), torch.float32)
            put(a + "out_proj.weight", lin(H, Hv * dv))
        else:
            a = Li + "self_attn."
            put(a + "q_proj.weight", lin(2 * Hq * dh, H))
            put(a + "k_proj.weight", lin(Hkv * dh, H))
            put(a + "v_proj.weight", lin(Hkv * dh, H))
            put(a + "o_proj.weight", lin(H, Hq * dh))
            put(a + "q_norm.weight", rn(dh, std=0.1))
            put(a + "k_norm.weight", rn(dh, std=0.1))
            put(a + "indexer.index_qk_proj.weight", lin((Hi + 1) * di, H))
            put(a + "indexer.q_layernorm.weight", rn(di, std=0.1))
            put(a + "indexer.k_layernorm.weight", rn(di, std=0.1))
        m = Li + "mlp."
        put(m + "gate.weight", lin(E, H))
        put(m + "shared_expert_gate.weight", lin(1, H))
        put(m + "shared_expert.gate_proj.weight", lin(Is, H))
        put(m + "shared_expert.up_proj.weight", lin(Is, H))
        put(m + "shared_expert.down_proj.weight", lin(H, Is))
        for e in range(E):
            g2 = nvfp4(f"{m}experts.{e}.gate_proj", I, H)
            nvfp4(f"{m}experts.{e}.up_proj", I, H)
            nv[f"{m}experts.{e}.up_proj.weight_scale_2"] = g2.clone()  # exports share it
            nvfp4(f"{m}experts.{e}.down_proj", H, I)
        if i + 1 in text["ple_layer_ids"]:
            p = Li + "ple."
            put(p + "key_proj.weight", lin(W, D))
            put(p + "value_proj.weight", lin(H, D))
            for nm in ("norm_key", "norm_query", "norm_conv"):
                put(p + nm + ".weight", rn(W, std=0.1))
            put(p + "conv1d.weight", rn(W, 1, 4, std=0.4))
            ple_index = text["ple_layer_ids"].index(i + 1)
            mults = ple_multipliers(V, N, ple_index, 1234)
            sizes, offsets, padded = ple_head_sizes(base, N, hpn, ple_index, div)
            put(p + "ple_embedding.layer_multipliers", torch.tensor(mults, dtype=torch.int64), torch.int64)
            put(p + "ple_embedding.ngram_heads_vocab_sizes", torch.tensor(sizes, dtype=torch.int64), torch.int64)
            put(p + "ple_embedding.ngram_heads_offsets", torch.tensor(offsets, dtype=torch.int64), torch.int64)
            dp = D // ((N - 1) * hpn)
            table = rn(padded, dp, std=100.0).clamp(-448, 448).to(torch.float8_e4m3fn)
            ple = {f"{p}ple_embedding.ngram_embedding.shard_{s}.weight": c.contiguous()
                   for s, c in enumerate(torch.chunk(table, parts, dim=0))}
            ple[p + "ple_embedding.ngram_embedding.weight_scale"] = torch.tensor([0.01], dtype=torch.bfloat16)
    # out-of-scope tensors that must be ignored
    put("mtp.fc_hidden.weight", lin(H, W))
    put("mtp.layers.0.mlp.gate.weight", lin(E, H))
    put("model.visual.patch_embed.proj.weight", rn(4, 3))
    os.makedirs(out_dir, exist_ok=True)
    # split like the release: bf16 backbone, nvfp4 experts, ple fp8 (shard order scrambled across files)
    names = {}
    bf_keys = sorted(bf)
    half = len(bf_keys) // 2
    files = [("model-bf16-00001-of-00002.safetensors", {k: bf[k] for k in bf_keys[:half]}),
             ("model-bf16-00002-of-00002.safetensors", {k: bf[k] for k in bf_keys[half:]}),
             ("model-nvfp4-00001-of-00001.safetensors", nv)]
    pk = sorted(ple)
    files.append(("model-plefp8-00001-of-00002.safetensors", {k: ple[k] for k in pk[1::2]}))
    files.append(("model-plefp8-00002-of-00002.safetensors", {k: ple[k] for k in pk[0::2]}))
    for fn, tensors in files:
        save_file(tensors, os.path.join(out_dir, fn), metadata={"format": "pt"})
        for k in tensors:
            names[k] = fn
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": names}, f, indent=1)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": eos, "eos_token_id": [im_end, eos], "do_sample": False}, f, indent=1)
    with open(os.path.join(out_dir, "hf_quant_config.json"), "w") as f:
        json.dump({"producer": {"name": "modelopt"}, "quantization": {
            "quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None,
            "exclude_modules": cfg["quantization_config"]["ignore"]}}, f, indent=1)
    rng = torch.Generator().manual_seed(seed + 7)
    rid = lambda n: torch.randint(0, V - 2, (n,), generator=rng).tolist()  # noqa: E731
    cases = [
        {"name": "single", "ids": [7], "generate": 4},
        {"name": "short", "ids": [1, 2, 3], "generate": 6},
        {"name": "eos_mid", "ids": [5, 9, eos, 12, 13, im_end, eos, eos, 40, 41, 42, 43, 44], "generate": 6},
        {"name": "len24", "ids": rid(24), "generate": 8},
        {"name": "len70_two_chunks", "ids": rid(70), "generate": 8},
    ]
    with open(os.path.join(out_dir, "tokens.json"), "w") as f:
        json.dump(cases, f)
    print(f"wrote tiny checkpoint to {out_dir}: {sum(len(t) for _, t in files)} tensors; tokens.json with {len(cases)} cases")


def load_result(path):
    """Returns (doc, getter) where getter(ref) gives a float32 numpy array for a blob reference."""
    import numpy as np
    with open(path) as f:
        doc = json.load(f)
    data = None
    if "blob" in doc:
        data = np.fromfile(os.path.join(os.path.dirname(os.path.abspath(path)), doc["blob"]), dtype="<f4")

    def get(ref):
        if ref is None:
            return None
        if "b64" in ref:
            return np.frombuffer(base64.b64decode(ref["b64"]), dtype="<f4").reshape(ref["shape"])
        return data[ref["offset"] // 4:(ref["offset"] + ref["nbytes"]) // 4].reshape(ref["shape"])
    return doc, get


def compare(path_a, path_b):
    """Compare two result files case by case (logits, greedy tokens, QSA selections)."""
    import numpy as np
    a, ga = load_result(path_a)
    b, gb = load_result(path_b)
    bc = {c["name"]: c for c in b["cases"]}
    worst = 0.0
    for x in a["cases"]:
        y = bc.get(x["name"])
        if y is None:
            print(f"{x['name']}: missing in {path_b}")
            continue
        A, B = ga(x["logits_all"]), gb(y["logits_all"])
        d = np.abs(A - B).max(-1)
        worst = max(worst, float(d.max()))
        qa, qb = x.get("qsa_selected", {}), y.get("qsa_selected", {})
        dq = {k: [i for i in range(len(qa[k])) if sorted(qa[k][i]) != sorted(qb.get(k, [[]] * len(qa[k]))[i])]
              for k in qa}
        amb = {k: v["ambiguous_queries"] for k, v in x.get("qsa_scores", {}).items()}
        ta, tb = x["greedy_nocache"]["tokens"], y["greedy_nocache"]["tokens"]
        print(f"{x['name']}: T={x['T']} max|dlogit|={float(d.max()):.3e} (logit absmax {float(np.abs(A).max()):.3f}) "
              f"first pos >1e-4: {next((i for i, v in enumerate(d) if v > 1e-4), None)} "
              f"argmax equal: {bool((A.argmax(-1) == B.argmax(-1)).all())} greedy equal: {ta == tb} "
              f"QSA selection differs at {dq} (ambiguous in A: {amb})")
    print(f"worst max|dlogit| = {worst:.3e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="checkpoint directory (config.json, *.safetensors, generation_config.json)")
    ap.add_argument("--tokens", help='JSON list of {"name", "ids": [...], "generate": N}')
    ap.add_argument("--out", help="output JSON (raw float32 sidecar written next to it as <out-stem>.bin)")
    ap.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1, ...")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                    help="model dtype (float32 = exact dequantized weights; bfloat16 = HF's default load dtype)")
    ap.add_argument("--indexer-budget", type=int, default=None,
                    help="override text_config.indexer_budget (tokens; must be a multiple of indexer_compress_ratio)")
    ap.add_argument("--attn-impl", default="eager", choices=["eager", "sdpa"])
    ap.add_argument("--experts-impl", default="eager", help="eager (reference loop) or grouped_mm / batched_mm")
    ap.add_argument("--ple-bf16-round", action="store_true",
                    help="round the FP8 PLE table to BF16 after multiplying by weight_scale (docs/model.md §6.2 BF16 engines)")
    ap.add_argument("--no-generate", action="store_true", help="skip HF generate()")
    ap.add_argument("--no-cache-check", action="store_true", help="skip the teacher-forced cached decode")
    ap.add_argument("--check-hf-loader", action="store_true",
                    help="also round-trip the dequantized weights through Qwen4ExpForCausalLM.from_pretrained")
    ap.add_argument("--inline", action="store_true", help="put logits inline in the JSON as base64")
    ap.add_argument("--selftest", action="store_true", help="check the hash constants of docs/model.md §6.1 (no torch needed)")
    ap.add_argument("--make-tiny", metavar="DIR", help="write a tiny random NVFP4-layout checkpoint and exit")
    ap.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"), help="compare two result files and exit")
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    if args.selftest:
        selftest()
        if not args.make_tiny and not args.checkpoint:
            return
    if args.make_tiny:
        make_tiny(args.make_tiny)
        return
    if not (args.checkpoint and args.tokens and args.out):
        ap.error("--checkpoint, --tokens and --out are required")
    if args.indexer_budget is not None and args.indexer_budget <= 0:
        ap.error("--indexer-budget must be positive")
    run_reference(args)


if __name__ == "__main__":
    main()
