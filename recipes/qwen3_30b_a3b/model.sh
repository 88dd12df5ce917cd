# shellcheck shell=bash disable=SC2034  # sourced by the recipes
# Qwen3-30B-A3B (config.json of Qwen/Qwen3-30B-A3B): 30.5B parameters, 3.3B active per token.
# Source this file; it defines MODEL_ARGS. `hyrl plan` counts the parameters from these flags.
# Built into hyrl's Qwen3-MoE and not flags: SwiGLU experts, no linear biases, RoPE on all of
# each head, every layer MoE (no dense layers), softmax router with top-k renormalised.
MODEL_ARGS=(
  --num-layers 48
  --hidden-size 2048
  --ffn-hidden-size 6144          # dense MLP size of the family; unused (every layer is MoE)
  --num-attention-heads 32
  --num-query-groups 4            # grouped-query attention: 4 key/value heads
  --kv-channels 128               # head dimension (32 x 128 = 4096 != hidden 2048)
  --qk-layernorm
  --normalization RMSNorm
  --norm-epsilon 1e-6
  --rotary-base 1000000
  --vocab-size 151936
  --max-position-embeddings 40960
  --untie-embeddings-and-output-weights
  --num-experts 128
  --moe-ffn-hidden-size 768
  --moe-router-topk 8
)
