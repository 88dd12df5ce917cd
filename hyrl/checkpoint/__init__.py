"""Checkpoints: what a checkpoint directory holds and how it is checked, read and named.

hf_io: Hugging Face directories (safetensors read one slice at a time, written in shards);
model_dir: a model checkpoint directory and its hyrl_checkpoint.json (the weights in it are
saved and loaded by hyrl.backends.megatron.model_checkpoint); trainer_state: the training
checkpoint's step directories (--save/--load) and the atomic save the backend writes its state
in (hyrl.backends.megatron.train_checkpoint); manifest: what a step holds, checked before a
load; ownership: which run a --save directory belongs to; checks: a conversion's input checked
before anything is built; cli and verify_cli: `hyrl convert` (its conversions are
hyrl.backends.megatron.convert) and `hyrl checkpoint verify`.
"""
