"""Launch one SGLang server as a child process and wait until it can generate.

    server = SGLangServerProcess(
        model_path, port=30000, tp_size=1, max_running_requests=128, colocated=True,
        extra_flags=["--sglang-attention-backend", "triton"], log_path="run/sglang_0.log",
    )
    server.start(startup_timeout_s=600)   # -> SGLangClient; raises SGLangError with the log tail
    ...
    server.kill()

Semantics:

* ``command()`` builds ``python -m sglang.launch_server ...`` from the arguments without starting
  anything. The flags hyrl sets: model path, host, port, ``--tp-size`` (= GPUs per engine),
  ``--base-gpu-id``, ``--dtype`` (bfloat16 unless told: SGLang's "auto" would turn a config
  without a dtype into float16), ``--mem-fraction-static`` (omitted when None: SGLang picks),
  ``--max-running-requests`` (= the rollout
  concurrency, so the server never queues what hyrl sends), ``--skip-tokenizer-init`` (hyrl sends
  and receives token ids), ``--skip-server-warmup`` (as slime: the warmup request can time out on
  a busy node; ``start`` checks /health_generate instead), ``--enable-memory-saver`` when
  colocated (needed by release/resume_memory_occupation), ``--random-seed`` when given, and
  ``--enable-return-routed-experts`` with ``return_routed_experts`` (--use-rollout-routing-replay:
  the server records each token's experts so /generate can return them).
* ``extra_flags`` passes any other SGLang flag through, written with an ``--sglang-`` prefix that
  is stripped: ``["--sglang-attention-backend", "triton"]`` -> ``--attention-backend triton``.
  ``server_args`` are appended verbatim (already without the prefix, e.g. ``shlex.split`` of
  ``--sglang-server-args``). A flag hyrl already sets is refused in both, with a ValueError, and so
  is an ``extra_flags`` flag without the prefix.
* ``start`` runs the command with stdout and stderr appended to ``log_path``, in its own process
  group (SGLang forks scheduler and detokenizer processes; ``kill`` ends the whole group), then
  polls GET /health_generate until it answers 200. If the process exits first, or the deadline
  passes, it raises ``SGLangError`` with the exit code (if any) and the last 40 log lines.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from hyrl.rollout.sglang.client import SGLangClient, SGLangError

SGLANG_FLAG_PREFIX = "--sglang-"
SERVER_DTYPES = ("bfloat16", "float16", "float32")  # what --dtype may be (besides SGLang's "auto")
LOG_TAIL_LINES = 40
# Flags command() sets itself; passing them again through extra_flags would be ambiguous.
MANAGED_FLAGS = (
    "--model-path",
    "--host",
    "--port",
    "--tp-size",
    "--base-gpu-id",
    "--dtype",
    "--mem-fraction-static",
    "--max-running-requests",
    "--skip-tokenizer-init",
    "--skip-server-warmup",
    "--enable-memory-saver",
    "--random-seed",
    "--enable-return-routed-experts",
)


def _die_with_parent() -> None:
    """In the server's child process before exec: SIGKILL it when its parent dies (Linux
    prctl PR_SET_PDEATHSIG). A Ray engine actor killed with SIGKILL cannot kill its server, and
    an orphaned server would keep the GPU memory its replacement needs; SGLang's own scheduler
    processes follow their parent the same way."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def check_not_managed(flags: Sequence[str]) -> list[str]:
    for flag in flags:
        if flag.split("=", 1)[0] in MANAGED_FLAGS:
            raise ValueError(
                f"SGLang flag {flag} is set by hyrl itself; use hyrl's own option for "
                "it instead of passing it through"
            )
    return list(flags)


def strip_sglang_prefix(extra_flags: Sequence[str]) -> list[str]:
    """["--sglang-foo", "bar", "--sglang-baz"] -> ["--foo", "bar", "--baz"]."""
    flags = []
    for token in extra_flags:
        if token.startswith(SGLANG_FLAG_PREFIX):
            flags.append("--" + token[len(SGLANG_FLAG_PREFIX) :])
        elif token.startswith("--"):
            raise ValueError(
                f"SGLang pass-through flag {token!r} must be written "
                f"{SGLANG_FLAG_PREFIX}{token[2:]} (the prefix is stripped)"
            )
        else:
            flags.append(token)  # the value of the previous flag
    return check_not_managed(flags)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now: a server's, or a weight-update group's rendezvous."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def log_tail(path: str | Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as err:
        return f"(could not read {path}: {err})"
    return "\n".join(text.splitlines()[-lines:])


class SGLangServerProcess:
    def __init__(
        self,
        model_path: str,
        *,
        host: str = "127.0.0.1",
        port: int = 30000,
        tp_size: int = 1,
        base_gpu_id: int = 0,
        mem_fraction_static: float | None = None,
        max_running_requests: int = 256,
        colocated: bool = False,
        random_seed: int | None = None,
        return_routed_experts: bool = False,
        dtype: str = "bfloat16",
        extra_flags: Sequence[str] = (),
        server_args: Sequence[str] = (),
        log_path: str | Path = "sglang_server.log",
        python: str = sys.executable,
        launch_command: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        die_with_parent: bool = False,
    ):
        self.model_path, self.host, self.port = str(model_path), host, port
        self.tp_size, self.base_gpu_id = tp_size, base_gpu_id
        self.mem_fraction_static = mem_fraction_static
        self.max_running_requests = max_running_requests
        self.colocated, self.random_seed = colocated, random_seed
        self.return_routed_experts = return_routed_experts
        if dtype not in SERVER_DTYPES:
            raise ValueError(f"SGLang server dtype {dtype!r} is not one of {SERVER_DTYPES}")
        self.dtype = dtype
        # Both checked here, so a bad flag fails at construction rather than at launch.
        self.extra_flags = strip_sglang_prefix(extra_flags) + check_not_managed(server_args)
        self.log_path = Path(log_path)
        self.python = python
        self.launch_command = list(launch_command) if launch_command is not None else None
        self.env = env
        self.die_with_parent = die_with_parent
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            self.python,
            "-m",
            "sglang.launch_server",
            "--model-path",
            self.model_path,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--tp-size",
            str(self.tp_size),
            "--base-gpu-id",
            str(self.base_gpu_id),
            "--dtype",
            self.dtype,
            "--max-running-requests",
            str(self.max_running_requests),
            "--skip-tokenizer-init",
            "--skip-server-warmup",
        ]
        if self.mem_fraction_static is not None:
            cmd += ["--mem-fraction-static", str(self.mem_fraction_static)]
        if self.colocated:
            cmd.append("--enable-memory-saver")
        if self.random_seed is not None:
            cmd += ["--random-seed", str(self.random_seed)]
        if self.return_routed_experts:
            cmd.append("--enable-return-routed-experts")
        return cmd + self.extra_flags

    def start(self, startup_timeout_s: float = 900.0, poll_interval_s: float = 1.0) -> SGLangClient:
        """Launch and wait for /health_generate; returns a client for the server."""
        if self.process is not None and self.process.poll() is None:
            raise SGLangError(
                f"SGLang server at {self.url} is already running (pid "
                f"{self.process.pid}); kill() it before starting another"
            )
        cmd = self.launch_command or self.command()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(cmd)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(self.env or {})},
                start_new_session=True,
                preexec_fn=_die_with_parent if self.die_with_parent else None,
            )
        client = SGLangClient(self.url)
        deadline = time.monotonic() + startup_timeout_s
        while True:
            exit_code = self.process.poll()
            if exit_code is not None:
                self.kill(grace_s=5.0)  # reap children the dead server may have left behind
                raise SGLangError(
                    f"SGLang server for {self.model_path} exited with code {exit_code} before "
                    f"becoming healthy at {self.url}. Last {LOG_TAIL_LINES} lines of "
                    f"{self.log_path}:\n{log_tail(self.log_path)}"
                )
            if client.health_generate(timeout_s=max(poll_interval_s, 5.0)):
                return client
            if time.monotonic() >= deadline:
                self.kill()
                raise SGLangError(
                    f"SGLang server for {self.model_path} did not answer "
                    f"{self.url}/health_generate "
                    f"within {startup_timeout_s:.0f} s (killed it). Raise the startup timeout if "
                    f"the model is large; last {LOG_TAIL_LINES} lines of {self.log_path}:\n"
                    f"{log_tail(self.log_path)}"
                )
            time.sleep(poll_interval_s)

    def exit_status(self, grace_s: float = 0.0) -> str | None:
        """None while the server runs (or was never started); once it has exited (waiting up
        to grace_s for a server that is going down), how: its exit code, or the signal that
        ended it (SGLang's scheduler SIGQUITs the server on an exception: CUDA error, OOM,
        NCCL), with the last lines of its log."""
        if self.process is None:
            return None
        try:
            code = self.process.wait(timeout=grace_s) if grace_s > 0 else self.process.poll()
        except subprocess.TimeoutExpired:
            return None
        if code is None:
            return None
        how = f"exited with code {code}"
        if code < 0:
            try:
                how = f"was ended by {signal.Signals(-code).name} (exit code {code})"
            except ValueError:
                pass
        return f"{how}; last lines of {self.log_path}:\n{log_tail(self.log_path, 10)}"

    def kill(self, grace_s: float = 30.0) -> None:
        """SIGTERM the server's process group, SIGKILL it after grace_s.

        A no-op if it was never started.
        """
        if self.process is None:
            return
        pgid = self.process.pid  # start_new_session: the group id is the server's pid
        try:
            # Even once the server itself has exited, its scheduler children may linger.
            os.killpg(pgid, signal.SIGTERM)
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.process.wait()
        except ProcessLookupError:
            self.process.wait()
