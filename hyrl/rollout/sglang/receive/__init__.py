"""SGLang's side of each weight transport (hyrl.config.weight_transport names them; the
trainer's side is hyrl.weight_sync): the routes and payloads that get the actor's buckets into
a server, one module per transport.

    sync = TensorWeightSync([client], buffer_bytes=1 << 30, tp_size=1, device="cuda:0")
    stats = sync.sync_buckets(actor_buckets)       # a stream of buckets -> SyncStats
    stats = sync.sync(checkpoint_named_tensors(hf_state_dict))   # or (name, tensor) pairs

* ``session.py``: what every transport runs around its transfer (pause -> weight-update session ->
  transfer -> flush -> continue), ``SyncStats``, ``post_to_all``.
* ``payload.py``: the checkpoint names SGLang loads, and a bucket serialized for
  ``/update_weights_from_tensor`` (SGLang's serializer, flattened buckets).
* ``tensor.py`` (``/update_weights_from_tensor``): ``TensorWeightSync``, an engine actor feeding
  its own server; ``ColocatedTensorSync``, rank 0 posting every training rank's handles
  (--colocate).
* ``distributed.py`` (``/update_weights_from_distributed``): ``DistributedWeightSync``, NCCL
  broadcasts from this process to every server.
* ``disk.py`` (``/update_weights_from_disk``): ``DiskWeightSync``, a safetensors directory.

``hyrl.rollout.sglang.engine.RECEIVERS`` picks the class by the transport's name.
"""
