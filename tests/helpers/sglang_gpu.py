"""What the SGLang checks of tests/gpu share: what each needs (skip marks that say so), a tiny
Qwen3-MoE whose greedy output a person can predict after a weight sync, the servers' options as
hyrl's build passes them, and the handles a test needs on a real server's processes (crash its
scheduler, wait for its processes to end, bound a call that could hang).

The counting machine (test_sglang.py's "successor" model, with a step): embeddings are one-hot
(token c -> unit vector e_c), attention and expert outputs are zero (o_proj = down_proj = 0) so
the last hidden state is e_c, and lm_head row t is 10 * e_{t - step}; after RMSNorm (e_c -> 8 e_c,
hidden 64) the logit of c + step is 80 and every other logit is 0, so greedy decoding counts up
by `step`, mod 16, and stops after EOS (id 1). A server that missed the new embeddings,
lm_head, final norm or any o_proj or down_proj does not count by the new step (the other
tensors do not move the output).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
import torch

EOS = 1
MEM_FRACTION_STATIC = 0.2  # of the GPU memory free at start-up, per server
BUFFER_BYTES = 64 * 1024  # weight-sync buckets: the tiny model (fp32, 503,296 B) is 9
STARTUP_TIMEOUT_S = 300.0  # a tiny server starts in well under a minute; first runs compile
REQUEST_TIMEOUT_S = 120.0  # --sglang-request-timeout-s
# SGLang flags as --sglang-server-args passes them: head_dim 16 needs triton attention; no CUDA
# graphs (start-up time). sglang_server_process appends --load-format dummy, as for a real run.
SERVER_ARGS = ["--attention-backend", "triton", "--disable-cuda-graph"]


def needs(gpus: int, why: str = "", ray: bool = True) -> list[Any]:
    """The marks of a check that needs `gpus` GPUs with SGLang (and Ray) installed; each skip
    reason says what is missing (`why`: why that many GPUs)."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    plural, why = ("s" if gpus > 1 else ""), (f": {why}" if why else "")
    missing = [name for name in ("sglang", "ray")[: 2 if ray else 1] if not installed(name)]
    return [
        pytest.mark.gpu,
        pytest.mark.gpus(gpus),
        pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
        pytest.mark.skipif(
            bool(missing),
            reason=f"needs {' and '.join(missing)} (requirements.txt's GPU stack)",
        ),
        pytest.mark.skipif(count < gpus, reason=f"needs {gpus} GPU{plural}, {count} visible{why}"),
    ]


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# --- the counting machine ----------------------------------------------------------------------


def tiny_hf_state_dict() -> dict[str, torch.Tensor]:
    """transformers' Qwen3-MoE at hyrl's TINY architecture, seeded: the names and shapes a
    trainer streams (`counting_weights` sets every value the greedy output depends on)."""
    from transformers import Qwen3MoeForCausalLM

    from hyrl.models.qwen3_moe.config import TINY

    torch.manual_seed(0)
    return Qwen3MoeForCausalLM(TINY.to_hf_config()).state_dict()


def counting_weights(
    hf_state_dict: dict[str, torch.Tensor], vocab_size: int, step: int
) -> dict[str, torch.Tensor]:
    """The weights under which greedy decoding counts up by `step` (module doc)."""
    new = {name: tensor.clone() for name, tensor in hf_state_dict.items()}
    tokens = torch.arange(vocab_size)
    embed = torch.zeros_like(new["model.embed_tokens.weight"])
    embed[tokens, tokens] = 1.0
    new["model.embed_tokens.weight"] = embed
    head = torch.zeros_like(new["lm_head.weight"])
    head[tokens, (tokens - step) % vocab_size] = 10.0
    new["lm_head.weight"] = head
    new["model.norm.weight"] = torch.ones_like(new["model.norm.weight"])
    for name in new:
        if name.endswith(("self_attn.o_proj.weight", "mlp.experts.down_proj")):
            new[name] = torch.zeros_like(new[name])
    return new


def counted(prompt: Sequence[int], step: int, max_new_tokens: int, vocab_size: int) -> list[int]:
    """The greedy response of the counting machine: prompt[-1] + step, + 2 step, ... mod
    vocab_size, up to and including EOS."""
    out: list[int] = []
    token = prompt[-1]
    while len(out) < max_new_tokens:
        token = (token + step) % vocab_size
        out.append(token)
        if token == EOS:
            break
    return out


# --- servers and engines as hyrl's build launches them ---------------------------------------


def server_options(model_path: str, log_dir: str, gpus_per_engine: int, concurrency: int) -> dict:
    """The options `make_sglang_engine` gets from `sglang_server_options` in a run."""
    return {
        "model_path": model_path,
        "concurrency": concurrency,
        "gpus_per_engine": gpus_per_engine,
        "colocated": False,
        "mem_fraction_static": MEM_FRACTION_STATIC,
        "server_args": list(SERVER_ARGS),
        "log_dir": log_dir,
        "seed": 0,
        "return_routed_experts": False,
    }


def visible_gpus() -> list[str]:
    """This process's GPUs as CUDA_VISIBLE_DEVICES names them (cuda:i is the i-th)."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given:
        return [g.strip() for g in given.split(",") if g.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]


@contextmanager
def ray_on_gpus(gpus: Sequence[str], num_cpus: int = 2) -> Iterator[None]:
    """A local Ray that places actors only on `gpus` (names as in `visible_gpus`): Ray reads
    CUDA_VISIBLE_DEVICES when it starts and its actors get only those GPUs. This process has
    initialised CUDA before, so its own cuda:0 stays its first GPU."""
    import ray

    torch.cuda.init()
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    try:
        ray.init(
            num_cpus=num_cpus,
            num_gpus=len(gpus),
            include_dashboard=False,
            log_to_driver=False,
        )
    finally:
        if saved is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved
    try:
        yield
    finally:
        ray.shutdown()


# --- a real server's processes ------------------------------------------------------------------


def server_process_at(url: str):
    """The `python -m sglang.launch_server` process serving `url` (a psutil.Process)."""
    import psutil

    port = url.rstrip("/").rsplit(":", 1)[1]
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "sglang.launch_server" in cmd and "--port" in cmd and port in cmd:
            if cmd[cmd.index("--port") + 1] == port:
                return proc
    raise LookupError(f"no sglang.launch_server process with --port {port} (serving {url})")


def scheduler_of(server) -> Any:
    """The server's scheduler child (SGLang titles it sglang::scheduler...)."""
    for child in server.children(recursive=True):
        # the title is in its cmdline; its name (15 characters) says "sglang::schedul"
        if " ".join(child.cmdline()).startswith("sglang::scheduler") or child.name().startswith(
            "sglang::sched"
        ):
            return child
    names = [" ".join(c.cmdline())[:60] for c in server.children(recursive=True)]
    raise LookupError(f"server {server.pid} has no sglang::scheduler child: {names}")


def crash(server, how: str) -> None:
    """End a live server as SGLang's scheduler failing does.

    "scheduler raised": SIGQUIT to the server, which is what SGLang 0.5.23's
    run_scheduler_process sends when its event loop raises (a CUDA error, an OOM, an NCCL
    error); the server's handler then kills its whole process tree.
    "scheduler died": SIGKILL to the scheduler, as a crash that runs no Python handler (NCCL's
    abort, std::terminate, the OOM killer); SGLang's subprocess watchdog then SIGQUITs the
    server."""
    if how == "scheduler raised":
        server.send_signal(signal.SIGQUIT)
    elif how == "scheduler died":
        scheduler_of(server).kill()
    else:
        raise ValueError(f"how must be 'scheduler raised' or 'scheduler died', got {how!r}")


def wait_ended(processes: Sequence[Any], timeout_s: float) -> None:
    """Return once every process has exited (gone, or a zombie its parent has not reaped yet:
    a zombie holds no GPU memory); raise naming the ones still running after timeout_s."""
    import psutil

    def running(proc) -> bool:
        try:
            return proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + timeout_s
    while any(running(p) for p in processes):
        if time.monotonic() >= deadline:
            alive = [p.pid for p in processes if running(p)]
            raise TimeoutError(f"processes {alive} still run {timeout_s:g} s after the crash")
        time.sleep(0.2)


def call_within(timeout_s: float, what: str, fn: Callable[[], Any]) -> Any:
    """fn() in a daemon thread; TimeoutError naming `what` if it has not returned within
    timeout_s (the thread is left behind: a call stuck in NCCL cannot be interrupted)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread below
            outcome["error"] = err

    thread = threading.Thread(target=run, name=what, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"{what} did not return within {timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
