"""The small qwen4_exp: every feature of the release at a size whose checkpoint, experts in
NVFP4, stays under 20 MB (train/README.md has the arithmetic).

8 layers (GDN x3 then QSA attention, twice), 4 hyper-connection streams, PLE on layer 2
(1-based, as in the release) with a 16-head hashed n-gram table of ~16k rows, 12 routed experts
(top 2) plus the shared expert. indexer_budget 2048 as in the release: the QSA selection is dense
up to 2051 tokens, the length the curriculum trains at.
"""

VOCAB = 4096  # 4000 BPE tokens + 26 added (ids 4000..4025), padded
EOS, IM_END = 4000, 4002  # <|endoftext|>, <|im_end|>


def text_config():
    L = 8
    return {
        "model_type": "qwen4_exp_text", "vocab_size": VOCAB, "hidden_size": 256, "num_hidden_layers": L,
        "layer_types": ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(L)],
        "full_attention_interval": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "attention_bias": False, "hidden_act": "silu", "rms_norm_eps": 1e-6, "max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000, "partial_rotary_factor": 0.25,
                            "mrope_section": [4, 2, 2], "mrope_interleaved": True},
        "partial_rotary_factor": 0.25,
        "linear_conv_kernel_dim": 4, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
        "linear_key_head_dim": 32, "linear_value_head_dim": 32, "mamba_ssm_dtype": "float32",
        "output_gate_type": "sigmoid",
        "num_experts": 12, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 128, "norm_topk_prob": True, "router_aux_loss_coef": 0.01,
        "output_router_logits": True,
        "hc_count": 4, "hc_lowrank": 16,
        "ple_layer_ids": [2], "ple_embed_dim": 256, "ple_conv_kernel_size": 4, "ngram_size": 3,
        "heads_per_ngram": 8, "ngram_vocab_size_base": 1000, "make_ngram_vocab_size_divisible_by": 128,
        "split_ngram_parts": 4, "seed": 1234,
        "indexer_n_heads": 4, "indexer_kv_heads": 1, "indexer_head_dim": 32, "indexer_budget": 2048,
        "indexer_compress_ratio": 4,
        "tie_word_embeddings": False, "bos_token_id": EOS, "eos_token_id": EOS, "pad_token_id": None,
        "initializer_range": 0.02, "dtype": "bfloat16",
    }


def generation_config():
    """Greedy: the checkpoint's sampling is argmax, so evaluation is deterministic."""
    return {"bos_token_id": EOS, "eos_token_id": [IM_END, EOS], "do_sample": False}
