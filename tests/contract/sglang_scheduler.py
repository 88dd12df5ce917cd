"""SGLang 0.5.23's weight-update path behind HTTP, on CPU, in a forked process.

    with SchedulerServer() as server:            # http://127.0.0.1:PORT, hyrl's client talks to it
        TensorWeightSync([SGLangClient(server.url)], ...).sync(named)
        server.recorded()                         # what SGLang's code handed the model

Each weight route decodes its JSON body as SGLang's FastAPI server does (pydantic, from the
io_struct types) and calls what the scheduler calls: ``SchedulerWeightUpdaterManager`` (the
session), ``TpModelWorker``'s weight methods (``deserialize_own_rank``: SGLang's
SafeUnpickler, after its torch-reduction patch; ``init_weights_update_group``) and the model
runner's ``WeightUpdater`` (its gloo rendezvous with the trainer, its broadcast receive, its
tensor unwrapping). The pause, continue and flush routes decode their bodies and answer as the
tokenizer manager does when nothing is running. Stand-ins: stubs.py.

Stricter than SGLang in one way: a body field the route's request type does not define is
refused (HTTP 422), where SGLang ignores it; hyrl must not believe it set what SGLang drops.

The server runs in a child process (fork): SGLang's receiving side patches torch's tensor
reductions process-wide, and the trainer side must not inherit that patch (it cannot reduce CPU
tensors). A forked child shares the parent's multiprocessing auth key, so CPU tensors shared by
file descriptor cross over as they would from a trainer to a server it launched.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WEIGHT_ROUTES = {  # route -> (io_struct type, SchedulerWeightUpdaterManager method)
    "/begin_weight_update": ("BeginWeightUpdateReqInput", "begin_weight_update"),
    "/end_weight_update": ("EndWeightUpdateReqInput", "end_weight_update"),
    "/update_weights_from_tensor": (
        "UpdateWeightsFromTensorReqInput",
        "update_weights_from_tensor",
    ),
    "/update_weights_from_distributed": (
        "UpdateWeightsFromDistributedReqInput",
        "update_weights_from_distributed",
    ),
    "/update_weights_from_disk": ("UpdateWeightFromDiskReqInput", "update_weights_from_disk"),
    "/init_weights_update_group": ("InitWeightsUpdateGroupReqInput", "init_weights_update_group"),
    "/destroy_weights_update_group": (
        "DestroyWeightsUpdateGroupReqInput",
        "destroy_weights_update_group",
    ),
}
CONTROL_ROUTES = {  # answered by the tokenizer manager; decoded all the same
    "/pause_generation": "PauseGenerationReqInput",
    "/continue_generation": "ContinueGenerationReqInput",
}
BASE_FIELDS = {"rid", "http_worker_ipc"}  # every request type's; hyrl never sends them


def request_fields(type_name: str) -> set[str]:
    """The fields of an io_struct request type, less the IPC bookkeeping every type has."""
    import msgspec
    from sglang.srt.managers import io_struct

    return {f.name for f in msgspec.structs.fields(getattr(io_struct, type_name))} - BASE_FIELDS


def required_fields(type_name: str) -> set[str]:
    import msgspec
    from sglang.srt.managers import io_struct

    return {
        f.name for f in msgspec.structs.fields(getattr(io_struct, type_name)) if f.required
    } - BASE_FIELDS


def decode(type_name: str, body: dict):
    """A JSON body -> the io_struct request, as SGLang's HTTP server decodes it (pydantic);
    ValueError for a field the type does not define."""
    import pydantic
    from sglang.srt.managers import io_struct

    unknown = set(body) - request_fields(type_name)
    if unknown:
        raise ValueError(f"{type_name} has no field(s) {sorted(unknown)}")
    return pydantic.TypeAdapter(getattr(io_struct, type_name)).validate_python(body)


class _StandInTpWorker:
    """SGLang's TpModelWorker weight methods, bound to a stand-in model runner."""

    def __init__(self, runner):
        from sglang.srt.managers.tp_worker import TpModelWorker

        self.model_runner = self._model_runner = runner
        for name in (
            "init_weights_update_group",
            "destroy_weights_update_group",
            "deserialize_own_rank",
            "weight_update_runners",
        ):
            setattr(self, name, getattr(TpModelWorker, name).__get__(self))


def _serve(connection) -> None:
    """The child process: build SGLang's manager over the stand-ins and serve until told."""
    import shutil
    import tempfile

    from sglang.srt.managers.scheduler_components.weight_updater import (
        SchedulerWeightUpdaterManager,
    )
    from sglang.srt.utils.common import normalize_serialized_named_tensor_payloads
    from stubs import RecordingModel, StandInModelRunner, StandInScheduler, scheduler_process

    from hyrl.models.qwen3_moe.config import TINY

    model_dir = tempfile.mkdtemp(prefix="hyrl-contract-")
    config = TINY.to_hf_config()
    config.architectures = ["Qwen3MoeForCausalLM"]
    config.save_pretrained(model_dir)  # what --model-path names; the weights never load
    scheduler_process(model_dir)
    model = RecordingModel()
    runner = StandInModelRunner(model)
    scheduler = StandInScheduler()
    manager = SchedulerWeightUpdaterManager(
        tp_worker=_StandInTpWorker(runner),
        draft_worker=None,
        memory_saver_adapter=None,
        flush_cache=lambda empty_cache=False: True,
        is_fully_idle=lambda **kwargs: True,
        scheduler=scheduler,
    )
    lock = threading.Lock()  # the scheduler handles one request at a time

    def answer(route: str, body: dict) -> tuple[int, dict | str]:
        if route == "/recorded":
            return 200, {
                "loaded": model.loaded,
                "session_open": manager._session is not None,
                "weight_versions": scheduler.weight_versions,
                "groups": sorted(runner.weight_updater._model_update_group),
            }
        if route == "/refuse_next_load":
            model.refuse_next = True
            return 200, {}
        if route == "/flush_cache":
            return 200, "Cache flushed.\n"
        try:
            if route in CONTROL_ROUTES:
                decode(CONTROL_ROUTES[route], body)
                return 200, {"status": "ok"}
            if route not in WEIGHT_ROUTES:
                return 404, {"detail": "Not Found"}
            type_name, method = WEIGHT_ROUTES[route]
            request = decode(type_name, body)
        except ValueError as err:  # pydantic's ValidationError is one
            return 422, {"detail": str(err)}
        if type_name == "UpdateWeightsFromTensorReqInput":  # the tokenizer manager's step
            request.serialized_named_tensors = normalize_serialized_named_tensor_payloads(
                request.serialized_named_tensors
            )
        if method.endswith("weights_update_group"):  # not serialized with the loads
            out = getattr(manager, method)(request)
        else:
            with lock:
                out = getattr(manager, method)(request)
        return (200 if out.success else 400), {"success": out.success, "message": out.message}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _serve(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else {}
            status, payload = answer(self.path.split("?", 1)[0], body or {})
            data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    connection.send(httpd.server_address[1])
    connection.recv()  # the parent says stop
    httpd.shutdown()
    shutil.rmtree(model_dir, ignore_errors=True)


class SchedulerServer:
    def __init__(self, start_timeout_s: float = 120.0):
        self.start_timeout_s = start_timeout_s

    def __enter__(self) -> SchedulerServer:
        context = multiprocessing.get_context("fork")
        self._connection, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child,), daemon=True)
        self._process.start()
        if not self._connection.poll(self.start_timeout_s):
            self._process.kill()
            raise RuntimeError("the SGLang scheduler server did not start")
        self.url = f"http://127.0.0.1:{self._connection.recv()}"
        return self

    def __exit__(self, *exc) -> None:
        self._connection.send("stop")
        self._process.join(30)
        if self._process.is_alive():
            self._process.kill()

    def recorded(self) -> dict:
        from hyrl.rollout.sglang.client import SGLangClient

        return SGLangClient(self.url)._call("GET", "/recorded")

    def refuse_next_load(self) -> None:
        from hyrl.rollout.sglang.client import SGLangClient

        SGLangClient(self.url)._call("POST", "/refuse_next_load", {})


@contextlib.contextmanager
def joined_weight_group(url: str, group_name: str):
    """A weight-update group joined with the server at `url` (gloo), left on exit: what the
    tables of request sequences assume."""
    from hyrl.rollout.sglang.client import SGLangClient
    from hyrl.rollout.sglang.receive.distributed import DistributedWeightSync

    sync = DistributedWeightSync(
        [SGLangClient(url, timeout_s=60.0)], 200, backend="gloo", group_name=group_name,
        timeout_s=60.0,
    )  # fmt: skip
    sync.connect()
    try:
        yield sync
    finally:
        sync.close()
