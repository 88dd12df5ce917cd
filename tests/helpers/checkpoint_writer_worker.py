"""One gloo rank that saves a megatron distributed checkpoint, waits for SIGTERM (acted on as
hyrl's preemption handler does: a flag), then saves again (two distributed checkpoints, as a
step's model and optimizer): what a rank does when a preemption signal reaches its whole
process group between two saves.

    python checkpoint_writer_worker.py OUT_DIR
prints "writer <pid>" once the first save is written, "saved" after the second."""

import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

received: list[int] = []


def save(directory: Path) -> None:
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing import ShardedTensor

    for part in ("model", "optimizer"):
        (directory / part).mkdir(parents=True)
        weights = ShardedTensor.from_rank_offsets("w", torch.arange(8.0))
        dist_checkpointing.save({"w": weights}, str(directory / part))


def main(out: Path) -> None:
    # here, not at the top: a process multiprocessing spawns runs this module's top level
    signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=0, world_size=1)
    from hyrl.backends.megatron import checkpoint_writer, cpu_compat

    cpu_compat.apply()
    writer = checkpoint_writer.start()
    save(out / "step_1")
    print(f"writer {writer}", flush=True)
    deadline = time.monotonic() + 60
    while not received and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(2.0)  # the step the signal came in finishes
    save(out / "step_2")
    print("saved", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
