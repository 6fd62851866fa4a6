#!/usr/bin/env python3
"""Trains the small qwen4_exp on the curriculum with transformers' own model code.

  python3 train/train.py --out DIR [--minutes 5] [--steps N] [--batch 32] [--seq 2048] [--seed 1]
                         [--resume] [--device auto] [--threads 1] [--workers 8]

Writes DIR/state.pt (model, optimizer, step, data position: --resume continues from it), DIR/log.jsonl
(loss, throughput, held-out accuracies), and at the end DIR/bf16/ (save_pretrained in BF16, with
the tokenizer and generation_config.json). With --minutes the number of steps is fixed after a
short timed warm-up and kept in the state, so the LR schedule is the same across resumes.
"""

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import model_config  # noqa: E402
import qsa_vectorized  # noqa: E402
from transformers.models.qwen4_exp.configuration_qwen4_exp import Qwen4ExpTextConfig  # noqa: E402
from transformers.models.qwen4_exp.modeling_qwen4_exp import Qwen4ExpForCausalLM  # noqa: E402

EVAL_KINDS = ("arithmetic", "copy", "retrieval")


def build_model(seed, device, init=None):
    torch.manual_seed(seed)
    if init:  # continue from an earlier run's BF16 export (a new optimizer and LR schedule)
        return Qwen4ExpForCausalLM.from_pretrained(init, dtype=torch.float32, attn_implementation="sdpa").to(device)
    text = {k: v for k, v in model_config.text_config().items() if k != "model_type"}
    cfg = Qwen4ExpTextConfig(**text)
    model = Qwen4ExpForCausalLM._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
    return model.to(device)


def lr_at(step, total, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def evaluate(model, sets, device, autocast, batch):
    """Teacher-forced exact match of the whole answer: the greedy answer equals the target (think
    block, reply, <|im_end|>: natural EOS included) exactly when every answer position's argmax is
    the target token."""
    model.eval()
    out = {}
    for kind, items in sets.items():
        right = 0
        for i in range(0, len(items), batch):
            chunk = items[i:i + batch]
            T = max(len(p) + len(a) for p, a in chunk)
            ids = torch.full((len(chunk), T), model_config.EOS, dtype=torch.long)
            for r, (p, a) in enumerate(chunk):
                ids[r, :len(p) + len(a)] = torch.tensor(p + a)
            with autocast():
                logits = model(input_ids=ids.to(device), use_cache=False).logits
            pred = logits.argmax(-1).cpu()
            for r, (p, a) in enumerate(chunk):
                right += int(torch.equal(pred[r, len(p) - 1:len(p) + len(a) - 1], torch.tensor(a)))
        out[kind] = right / len(items)
    model.train()
    return out


def save_state(path, model, opt, step, total, rows):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "total": total, "rows": rows}, tmp)
    os.replace(tmp, path)


def export(model, out_dir):
    """BF16 save_pretrained + the tokenizer and generation config the exporter ships with it."""
    bf16 = os.path.join(out_dir, "bf16")
    model.to(torch.bfloat16).save_pretrained(bf16)
    tok_dir = os.path.dirname(data.TOKENIZER)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, name), bf16)
    with open(os.path.join(bf16, "generation_config.json"), "w") as f:
        json.dump(model_config.generation_config(), f, indent=2)
    return bf16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=5.0, help="training time budget (sets the step count)")
    ap.add_argument("--steps", type=int, default=0, help="fixed step count instead of --minutes")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--init", default="", help="start from the weights of an earlier run's bf16/ export")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--workers", type=int, default=8, help="data processes")
    ap.add_argument("--eval_every", type=int, default=200)
    ap.add_argument("--eval_n", type=int, default=128, help="held-out examples per kind")
    ap.add_argument("--ckpt_minutes", type=float, default=1.5)
    ap.add_argument("--check_indexer", action="store_true", help="compare the batched QSA indexer with HF's first")
    ap.add_argument("--profile", action="store_true", help="print the torch profiler's top ops for step 6")
    args = ap.parse_args()

    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    if args.threads:
        torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)

    model = build_model(args.seed, device, args.init)
    qsa_vectorized.install()
    if args.check_indexer:
        # At the training length, the regime training runs in (dense up to budget + 3 tokens). Past
        # it, relu'd block scores of a fresh model tie at 0 and the two top-k break ties differently.
        g = torch.Generator().manual_seed(args.seed)
        ids = torch.randint(0, model_config.EOS, (2, args.seq), generator=g).to(device)
        print(f"batched QSA indexer matches transformers' on {qsa_vectorized.check(model, ids)} layer calls", flush=True)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "ngram_embedding" not in n]
    other = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "ngram_embedding" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=cuda)
    state_path = os.path.join(args.out, "state.pt")
    step, total, rows = 0, args.steps, 0
    if args.resume and os.path.exists(state_path):
        st = torch.load(state_path, map_location=device)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, total, rows = st["step"], st["total"], st["rows"]
        print(f"resumed at step {step} of {total}", flush=True)
    sets = {k: data.eval_set(k, args.eval_n) for k in EVAL_KINDS}
    log = open(os.path.join(args.out, "log.jsonl"), "a")
    stream = data.batches(args.seed, args.seq, args.batch, start_row=rows, workers=args.workers)
    t_start = time.time()
    t_last_ckpt = t_start
    timed_from = None
    while total == 0 or step < total:
        t_data = time.time()
        ids, labels = next(stream)
        ids, labels = torch.from_numpy(ids).to(device), torch.from_numpy(labels).to(device)
        t_compute = time.time()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total or 10**9, args.lr, args.warmup)
        profiler = torch.profiler.profile() if args.profile and step == 5 else contextlib.nullcontext()
        with profiler:
            with autocast():
                out = model(input_ids=ids, labels=labels, use_cache=False)
            out.loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        step += 1
        if step <= 13:  # where the first steps' time goes: waiting for data or computing
            if cuda:
                torch.cuda.synchronize()
            print(f"step {step}: data {1000 * (t_compute - t_data):.0f} ms, compute {1000 * (time.time() - t_compute):.0f} ms",
                  flush=True)
        if isinstance(profiler, torch.profiler.profile):
            sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
            print(profiler.key_averages().table(sort_by=sort, row_limit=25), flush=True)
        rows += args.batch
        if step == 3:  # the first steps include allocation and warm-up
            if cuda:
                torch.cuda.synchronize()
            timed_from = time.time()
        if total == 0 and step == 13:
            if cuda:
                torch.cuda.synchronize()
            per_step = (time.time() - timed_from) / 10
            total = max(step + 1, int((args.minutes * 60 - (time.time() - t_start)) / per_step) + step)
            print(f"{per_step * 1000:.0f} ms/step: training for {total} steps", flush=True)
        if step % 10 == 0 or step == total:
            rec = {"step": step, "total": total, "loss": round(out.loss.item(), 4),
                   "aux": round(out.aux_loss.item(), 4), "gnorm": round(gnorm.item(), 3),
                   "lr": opt.param_groups[0]["lr"], "elapsed_s": round(time.time() - t_start, 1),
                   "tokens": rows * args.seq}
            if step % args.eval_every == 0 or step == total:
                rec["eval"] = evaluate(model, sets, device, autocast, batch=32)
            print(json.dumps(rec), flush=True)
            log.write(json.dumps(rec) + "\n")
            log.flush()
        if time.time() - t_last_ckpt > args.ckpt_minutes * 60:
            save_state(state_path, model, opt, step, total, rows)
            t_last_ckpt = time.time()
    save_state(state_path, model, opt, step, total, rows)
    print(f"trained {step} steps, {rows * args.seq / 1e6:.1f}M tokens in {time.time() - t_start:.0f} s; "
          f"wrote {export(model, args.out)}", flush=True)
    os._exit(0)  # the data pool's workers are still producing: do not wait for them


if __name__ == "__main__":
    main()
