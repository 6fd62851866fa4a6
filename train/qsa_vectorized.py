"""A batched QSA indexer for training: the same selection as transformers'
Qwen4ExpTextQSAIndexer.forward, without its Python loop over every (sequence, query) pair (which
makes a 2048-token batch take minutes per layer).

It covers what training feeds the model: no cache, no padding, a plain causal mask, so the
visible tokens of query t are 0..t. The selection is not differentiable in either version (top-k
of scores, then a boolean mask), so gradients are unchanged. `check()` compares the two.
"""

import math

import torch
from transformers.models.qwen4_exp import modeling_qwen4_exp as mq

_hf_forward = mq.Qwen4ExpTextQSAIndexer.forward


@torch.no_grad()
def _batched_forward(self, hidden_states, position_embeddings, attention_mask, past_key_values):
    if past_key_values is not None:  # generation: the reference path
        return _hf_forward(self, hidden_states, position_embeddings, attention_mask, past_key_values)
    B, T, _ = hidden_states.shape
    r, d = self.compress_ratio, self.index_head_dim
    visible = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
    causal = torch.ones(T, T, dtype=torch.bool, device=hidden_states.device).tril()
    if not torch.equal(visible[:, 0], causal.expand(B, T, T)):
        return _hf_forward(self, hidden_states, position_embeddings, attention_mask, past_key_values)
    nb = T // r
    keep = causal.clone()
    if nb > self.block_topk:
        cos, sin = position_embeddings
        q, raw_keys = torch.split(self.index_qk_proj(hidden_states),
                                  [self.index_n_heads * d, self.index_kv_heads * d], dim=-1)
        q = mq.apply_rotary_pos_emb(self.q_layernorm(q.reshape(B, T, -1, d)), cos=cos, sin=sin, unsqueeze_dim=2)
        pooled = raw_keys[:, : nb * r].reshape(B, nb, r, d).float().mean(2).to(raw_keys.dtype)
        starts = torch.arange(nb, device=hidden_states.device) * r
        kb = mq.apply_rotary_pos_emb(self.k_layernorm(pooled).unsqueeze(2), cos=cos[:, starts], sin=sin[:, starts],
                                     unsqueeze_dim=2).squeeze(2)
        scores = torch.relu(torch.einsum("bthd,bnd->btnh", q.float(), kb.float())).sum(-1) / math.sqrt(d)
        # Block b is complete for query t when its last token r·b + r - 1 <= t.
        complete = (starts[None, :] + r - 1) <= torch.arange(T, device=hidden_states.device)[:, None]
        scores = scores.masked_fill(~complete, float("-inf"))
        top = scores.topk(self.block_topk, dim=-1).indices  # [B, T, K]
        chosen = torch.zeros(B, T, nb, dtype=torch.bool, device=hidden_states.device)
        chosen.scatter_(-1, top, True)
        chosen &= complete
        tokens = chosen.repeat_interleave(r, dim=-1)
        tokens = torch.nn.functional.pad(tokens, (0, T - nb * r))
        # Tail: the tokens of query t's incomplete last block are always kept.
        pos = torch.arange(T, device=hidden_states.device)
        tail = (pos[None, :] >= (pos[:, None] + 1) // r * r) & causal
        keep = (tokens | tail) & causal
    else:
        keep = keep.expand(B, T, T)
    mask = keep.expand(B, T, T).unsqueeze(1)
    if attention_mask.is_floating_point():
        return torch.where(mask, attention_mask.new_zeros(()), torch.finfo(attention_mask.dtype).min)
    return mask


def install():
    mq.Qwen4ExpTextQSAIndexer.forward = _batched_forward


def check(model, ids):
    """Both indexers give the same mask on every attention layer (ties aside, none in practice)."""
    captured = []
    layers = [m for m in model.modules() if isinstance(m, mq.Qwen4ExpTextQSAIndexer)]

    def hook(mod, args, kwargs, out):
        captured.append((mod, args, kwargs, out))

    handles = [m.register_forward_hook(hook, with_kwargs=True) for m in layers]
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
    for h in handles:
        h.remove()
    for mod, args, kwargs, out in captured:
        ref = _hf_forward(mod, *args, **kwargs)
        if not torch.equal(ref, out):
            raise SystemExit(f"batched QSA indexer differs from transformers' on layer {mod.layer_idx}")
    return len(captured)
