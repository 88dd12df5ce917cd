# Tiny Qwen3-MoE for CPU: 2 layers, 4 experts (top-2), 16-token vocabulary, ~126k parameters.
# Same architecture family and flags as recipes/qwen3_30b_a3b/model.sh, only smaller.
MODEL_ARGS=(
  --num-layers 2
  --hidden-size 64
  --ffn-hidden-size 128
  --num-attention-heads 4
  --num-query-groups 2
  --kv-channels 16
  --num-experts 4
  --moe-ffn-hidden-size 64
  --moe-router-topk 2
  --qk-layernorm
  --normalization RMSNorm
  --norm-epsilon 1e-6
  --rotary-base 1000000
  --vocab-size 16
  --max-position-embeddings 64
  --untie-embeddings-and-output-weights
)
