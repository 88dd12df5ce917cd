"""A fake SGLang server in a process of its own that dies the way SGLang's does.

    python tests/helpers/dying_sglang_server.py --port P --die-on-generate N [--once MARKER]

It serves FakeSGLangServer's routes on 127.0.0.1:P (GET /health, /health_generate answer at
once) beside a child process standing for SGLang's scheduler. On its N-th /generate request the
"scheduler" fails as SGLang 0.5.23's does on an exception (CUDA error, OOM, NCCL):
sglang/srt/managers/scheduler.py, run_scheduler_process, sends the server process SIGQUIT; the
server's handler (tokenizer_manager.py, running_phase_sigquit_handler, or the launch phase's
handler in entrypoints/engine.py) calls utils/common.py kill_process_tree(os.getpid()), which
SIGKILLs the children and then the server itself. So the server ends by SIGKILL (exit code -9),
its scheduler child with it, and the request in flight is never answered. With --once MARKER
it dies only if MARKER does not exist yet, and creates it (a replacement server then serves).

    python tests/helpers/dying_sglang_server.py --port P --hang-on-generate N [--once MARKER]

hangs instead, as a server whose scheduler is stuck: from its N-th /generate on, no /generate
and no /health is answered (SGLang 0.5.23's /health waits for a token from the scheduler).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_sglang_server import FakeSGLangServer


class DyingServer(FakeSGLangServer):
    def __init__(self, fail_on_generate: int, hang: bool, once: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.fail_on_generate, self.hang = fail_on_generate, hang
        self.once = Path(once) if once else None
        self.generates = 0
        self.hung = False
        self._count_lock = threading.Lock()

    def _dispatch(self, method: str, route: str, payload: dict | None):
        if self.hung and route in ("/health", "/health_generate"):
            time.sleep(3600)  # a stuck scheduler: no token, no answer
        return super()._dispatch(method, route, payload)

    def _generate(self, payload: dict) -> dict:
        with self._count_lock:
            self.generates += 1
            dying = self.generates >= self.fail_on_generate
            if dying and self.once is not None and not self.hung:
                dying = not self.once.exists()
                self.once.touch()
            self.hung = self.hung or (dying and self.hang)
        if self.hung:
            print("fake scheduler: stuck; nothing is answered from here on", flush=True)
            time.sleep(3600)
        if dying:
            print(f"fake scheduler: exception; SIGQUIT to the server {os.getpid()}", flush=True)
            os.kill(os.getpid(), signal.SIGQUIT)
            time.sleep(10)  # never answered: the handler ends the process first
        return super()._generate(payload)


def kill_process_tree(signum, frame) -> None:
    """As SGLang's SIGQUIT handler: SIGKILL the children, then this process."""
    print("Received sigquit from a child process. It usually means the child failed.", flush=True)
    SCHEDULER.kill()
    os.kill(os.getpid(), signal.SIGKILL)


SCHEDULER: subprocess.Popen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--die-on-generate", type=int)
    how.add_argument("--hang-on-generate", type=int)
    parser.add_argument("--once", default=None)
    args = parser.parse_args()
    hang = args.hang_on_generate is not None
    fail_on = args.hang_on_generate if hang else args.die_on_generate
    global SCHEDULER
    SCHEDULER = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    signal.signal(signal.SIGQUIT, kill_process_tree)
    with DyingServer(fail_on, hang, args.once, port=args.port):
        print(f"fake SGLang server on port {args.port}", flush=True)
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
