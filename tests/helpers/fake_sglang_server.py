"""A protocol test double for the routes hyrl calls, not a substitute for SGLang.

It answers the SGLang HTTP routes hyrl's client uses with the request/response JSON shapes of the
real server (sglang 0.5.x, ``--skip-tokenizer-init``: token ids in, ``output_ids`` +
``meta_info`` out). What it checks is the *protocol* - route names, field names, call order,
concurrency - never model quality, kernels, memory or real CUDA IPC.

The toy "model" is deterministic and depends on its weights, so a weight sync is visible in the
generations:

    shift = round(sum of every weight tensor's elements)
    next token = (previous token + 1 + shift) % vocab_size
    log-prob of a generated token t = -0.1 * (t % 5 + 1)

Generation stops after the first token in ``stop_token_ids`` (finish_reason
``{"type": "stop", "matched": t}``, token kept) or after ``max_new_tokens``
(``{"type": "length", "length": n}``). Temperature and top-p are accepted and ignored.

Routed experts (rollout routing replay): started with ``enable_return_routed_experts`` (the real
server's ``--enable-return-routed-experts``), a request with ``"return_routed_experts": true`` gets
``meta_info["routed_experts"]``: base64 of int32 little-endian ids, one row for each of the
``prompt_tokens + completion_tokens - 1`` tokens that went through the model, ``num_moe_layers x
moe_top_k`` ids per row, where the expert of token t (at that position) in layer l, slot k is

    (t + l + k) % num_experts

Started without it, the fake leaves the key out, as the real server does.

Stricter than SGLang on purpose: a payload field the real route does not define is refused with
HTTP 400 (SGLang ignores unknown top-level fields but refuses unknown sampling params), so a typo
fails a test. Weight updates must name parameters the fake holds (as SGLang's ``load_weights``).

Weight-update sessions, as SGLang 0.5.23's scheduler keeps them
(``managers/scheduler_components/weight_updater.py``): ``/begin_weight_update`` opens one and is
refused while one is open; ``/end_weight_update`` closes it and is refused without one; tensor and
distributed updates are refused (HTTP 400, ``success: false``) outside a session; disk updates are
not. ``tests/contract/`` runs the same table of request sequences against SGLang's own scheduler
code (``tests/helpers/sglang_sessions.py``).

Weight loading: tensor mode deserializes ``serialized_named_tensors[0]`` with
``pickle_deserializer`` (the tests' stand-in for CUDA IPC); distributed mode joins the trainer's
gloo group as rank ``rank_offset`` (store keys laid out as torch's ``_new_process_group_helper``
lays them out, which is what SGLang uses) and receives the broadcasts: one per tensor, or with
``load_format="flattened_bucket"`` one uint8 broadcast of the whole bucket, laid out and refused
as SGLang's ``FlattenedTensorBucket.empty`` does; disk mode reads the safetensors shards in
``model_path``.

Every call is recorded in ``calls`` as (route, payload) in arrival order; ``fail(route)`` makes a
route answer an error; ``peak_in_flight`` is the most /generate requests served at once.
With ``router_workers`` it also answers GET /workers as sglang-router 0.3 does, listing them
(pass the fake's own URL to play a router in front of itself).
"""

from __future__ import annotations

import base64
import datetime
import json
import pickle
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import torch

ROUTE_FIELDS = {  # the fields of each route's request dataclass in sglang's io_struct.py
    "/generate": {
        "input_ids",
        "sampling_params",
        "return_logprob",
        "rid",
        "stream",
        "return_routed_experts",
    },
    "/pause_generation": {"mode"},
    "/continue_generation": set(),
    "/flush_cache": set(),
    "/begin_weight_update": {"selector"},
    "/end_weight_update": set(),
    "/update_weights_from_tensor": {
        "serialized_named_tensors",
        "load_format",
        "flush_cache",
        "abort_all_requests",
        "weight_version",
        "selector",
    },
    "/init_weights_update_group": {
        "master_address",
        "master_port",
        "rank_offset",
        "world_size",
        "group_name",
        "backend",
    },
    "/destroy_weights_update_group": {"group_name"},
    "/update_weights_from_distributed": {
        "names",
        "dtypes",
        "shapes",
        "group_name",
        "flush_cache",
        "abort_all_requests",
        "weight_version",
        "load_format",
        "selector",
    },
    "/update_weights_from_disk": {
        "model_path",
        "load_format",
        "abort_all_requests",
        "weight_version",
        "flush_cache",
    },
    "/release_memory_occupation": {"tags"},
    "/resume_memory_occupation": {"tags"},
}
SAMPLING_FIELDS = {
    "max_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "stop",
    "stop_token_ids",
    "skip_special_tokens",
    "no_stop_trim",
    "ignore_eos",
    "spaces_between_special_tokens",
    "n",
    "min_new_tokens",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
    "sampling_seed",
}
REQUIRED_FIELDS = {
    "/update_weights_from_tensor": {"serialized_named_tensors"},
    "/init_weights_update_group": {"master_address", "master_port", "rank_offset", "world_size"},
    "/update_weights_from_distributed": {"names", "dtypes", "shapes"},
    "/update_weights_from_disk": {"model_path"},
}


def routed_expert_ids(
    tokens: list[int], num_moe_layers: int, moe_top_k: int, num_experts: int
) -> torch.Tensor:
    """The fake's routing of these tokens: int32 [len(tokens), layers, top-k] of
    (token + layer + slot) % num_experts."""
    token = torch.tensor(tokens, dtype=torch.int32).view(-1, 1, 1)
    layer = torch.arange(num_moe_layers, dtype=torch.int32).view(1, -1, 1)
    slot = torch.arange(moe_top_k, dtype=torch.int32).view(1, 1, -1)
    return (token + layer + slot) % num_experts


def pickle_serializer(named) -> str:
    """The tests' serializer for tensor sync: base64 pickle of CPU tensors."""
    return base64.b64encode(pickle.dumps([(n, t.detach().cpu()) for n, t in named])).decode()


def pickle_deserializer(data: str):
    return pickle.loads(base64.b64decode(data))


def default_weights(vocab_size: int = 16) -> dict[str, torch.Tensor]:
    """Zero weights (shift 0) under checkpoint names of one tiny Qwen3-MoE layer with 2 experts."""
    return {
        "model.embed_tokens.weight": torch.zeros(vocab_size, 4),
        "model.layers.0.mlp.experts.0.gate_proj.weight": torch.zeros(3, 4),
        "model.layers.0.mlp.experts.0.up_proj.weight": torch.zeros(3, 4),
        "model.layers.0.mlp.experts.0.down_proj.weight": torch.zeros(4, 3),
        "model.layers.0.mlp.experts.1.gate_proj.weight": torch.zeros(3, 4),
        "model.layers.0.mlp.experts.1.up_proj.weight": torch.zeros(3, 4),
        "model.layers.0.mlp.experts.1.down_proj.weight": torch.zeros(4, 3),
        "lm_head.weight": torch.zeros(vocab_size, 4),
    }


# SGLang 0.5.23's refusals (scheduler_components/weight_updater.py), word for word.
SESSION_ROUTES = ("/update_weights_from_tensor", "/update_weights_from_distributed")
OUTSIDE_SESSION = "must run between begin_weight_update() and end_weight_update()"
SESSION_ALREADY_OPEN = "a weight-update session is already open; call end_weight_update() first"
NO_SESSION_TO_END = "no weight-update session is open; call begin_weight_update() first"


def _refused(message: str) -> dict:
    return {"success": False, "message": message}


def hf_state_dict_with_shift(shift: float) -> dict[str, torch.Tensor]:
    """The fake's default weights in hyrl's HF layout (fused experts), all zero but one entry =
    shift, so a sync of them makes the fake's shift round(shift)."""
    gate_up = torch.zeros(2, 6, 4)  # [experts, 2 * ffn, hidden]
    gate_up[1, 4, 0] = shift  # expert 1, up_proj row 1
    return {
        "model.embed_tokens.weight": torch.zeros(16, 4),
        "model.layers.0.mlp.experts.gate_up_proj": gate_up,
        "model.layers.0.mlp.experts.down_proj": torch.zeros(2, 4, 3),  # [experts, hidden, ffn]
        "lm_head.weight": torch.zeros(16, 4),
    }


def _flattened_bucket(names, dtypes, shapes) -> tuple[torch.Tensor, list]:
    """The uint8 receive buffer of a flattened bucket and the named views into it, laid out as
    SGLang 0.5.23's ``FlattenedTensorBucket.empty`` lays them out (back to back, no padding);
    ValueError, before any broadcast, where it raises one (its words)."""
    layout, offset = [], 0
    for name, dtype_name, shape in zip(names, dtypes, shapes, strict=True):
        dtype, size = getattr(torch, dtype_name), torch.Size(shape)
        if any(dim < 0 for dim in size):
            raise ValueError(f"Negative dimension in received tensor {name}: {size}")
        if offset % dtype.itemsize:
            raise ValueError(
                f"Unaligned received tensor {name}: byte offset {offset}, dtype {dtype}"
            )
        layout.append((name, dtype, size, offset))
        offset += size.numel() * dtype.itemsize
    if not layout:
        raise ValueError("Cannot create empty tensor bucket")
    flat = torch.empty(offset, dtype=torch.uint8)
    views = [
        (name, flat[start : start + size.numel() * dtype.itemsize].view(dtype).view(size))
        for name, dtype, size, start in layout
    ]
    return flat, views


class _HTTPError(Exception):
    def __init__(self, status: int, body: dict | str):
        self.status, self.body = status, body


class _Server(ThreadingHTTPServer):
    # The stdlib's listen backlog of 5 resets connections when many requests arrive at once
    # (uvicorn, which serves SGLang, listens with 2048).
    request_queue_size = 1024


class FakeSGLangServer:
    def __init__(
        self,
        vocab_size: int = 16,
        weights: dict[str, torch.Tensor] | None = None,
        tp_size: int = 1,
        generate_delay_s: float = 0.0,
        router_workers: list[str] | None = None,
        enable_return_routed_experts: bool = False,
        num_moe_layers: int = 1,
        moe_top_k: int = 2,
        num_experts: int = 2,
        port: int = 0,
    ):
        self.vocab_size = vocab_size
        # as --enable-return-routed-experts: answer return_routed_experts requests with the ids
        self.enable_return_routed_experts = enable_return_routed_experts
        self.num_moe_layers, self.moe_top_k, self.num_experts = (
            num_moe_layers,
            moe_top_k,
            num_experts,
        )
        self.weights = weights if weights is not None else default_weights(vocab_size)
        self.tp_size = tp_size
        self.generate_delay_s = generate_delay_s
        # also answer as an sglang-router listing these servers (GET /workers); None = not a router
        self.router_workers = router_workers
        self.calls: list[tuple[str, dict | None]] = []
        self.failures: dict[str, tuple[int, dict | str]] = {}
        self.in_flight = 0
        self.peak_in_flight = 0
        self.paused = False
        self.session_open = False  # between /begin_weight_update and /end_weight_update
        self.weight_version = "default"
        self._groups: dict[str, object] = {}
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # ---- lifecycle and test controls -------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> FakeSGLangServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def fail(self, route: str, status: int = 400, body: dict | str | None = None) -> None:
        self.failures[route] = (
            status,
            body
            if body is not None
            else {"success": False, "message": f"injected failure of {route}"},
        )

    def routes_called(self) -> list[str]:
        return [route for route, _ in self.calls]

    @property
    def shift(self) -> int:
        return round(sum(float(t.double().sum()) for t in self.weights.values()))

    # ---- the toy model ---------------------------------------------------------------------

    def _generate(self, payload: dict) -> dict:
        input_ids, params = payload["input_ids"], payload.get("sampling_params") or {}
        if not (
            isinstance(input_ids, list) and input_ids and all(isinstance(i, int) for i in input_ids)
        ):
            raise _HTTPError(
                400, {"error": {"message": "input_ids must be a non-empty list of int"}}
            )
        unknown = set(params) - SAMPLING_FIELDS
        if unknown:
            raise _HTTPError(
                400, {"error": {"message": f"unknown sampling params {sorted(unknown)}"}}
            )
        stop_ids = set(params.get("stop_token_ids") or [])
        max_new_tokens = params.get("max_new_tokens", 128)
        shift = self.shift
        tokens, finish = [], {"type": "length", "length": max_new_tokens}
        previous = input_ids[-1]
        for _ in range(max_new_tokens):
            previous = (previous + 1 + shift) % self.vocab_size
            tokens.append(previous)
            if previous in stop_ids:
                finish = {"type": "stop", "matched": previous}
                break
        meta = {
            "id": payload.get("rid") or f"fake-{time.monotonic_ns()}",
            "finish_reason": finish,
            "prompt_tokens": len(input_ids),
            "completion_tokens": len(tokens),
            "cached_tokens": 0,
            "weight_version": self.weight_version,
        }
        if payload.get("return_logprob"):
            meta["output_token_logprobs"] = [[-0.1 * (t % 5 + 1), t, None] for t in tokens]
        if payload.get("return_routed_experts") and self.enable_return_routed_experts:
            ran = (input_ids + tokens)[:-1]  # the last sampled token is never fed back
            ids = routed_expert_ids(ran, self.num_moe_layers, self.moe_top_k, self.num_experts)
            meta["routed_experts"] = base64.b64encode(ids.numpy().astype("<i4").tobytes()).decode()
        return {"output_ids": tokens, "meta_info": meta}

    # ---- weight loading --------------------------------------------------------------------

    def _load(self, named) -> None:
        unknown = [n for n, _ in named if n not in self.weights]
        if unknown:
            raise _HTTPError(
                400,
                {"success": False, "message": f"load_weights: unknown parameters {unknown[:5]}"},
            )
        for name, tensor in named:
            if tuple(tensor.shape) != tuple(self.weights[name].shape):
                raise _HTTPError(400, {"success": False, "message": f"shape mismatch for {name}"})
            self.weights[name] = tensor.detach().clone().float()

    def _join_group(self, p: dict) -> None:
        import torch.distributed as dist

        if p.get("backend", "nccl") != "gloo":
            raise _HTTPError(400, {"success": False, "message": "the fake joins gloo groups only"})
        timeout = datetime.timedelta(seconds=60)
        rank = p["rank_offset"]  # tp rank 0 of this (tp_size 1) server
        name = p.get("group_name", "weight_update_group")
        store, _, _ = next(
            dist.rendezvous(
                f"tcp://{p['master_address']}:{p['master_port']}",
                rank,
                p["world_size"],
                timeout=timeout,
            )
        )
        # The key layout _new_process_group_helper gives a gloo group (SGLang's side uses it).
        store = dist.PrefixStore(
            "cpu/", dist.PrefixStore(f"{name}/", dist.PrefixStore(name, store))
        )
        self._groups[name] = dist.ProcessGroupGloo(store, rank, p["world_size"], timeout)

    def _receive(self, p: dict) -> None:
        import torch.distributed as dist

        name = p.get("group_name", "weight_update_group")
        if name not in self._groups:
            raise _HTTPError(400, {"success": False, "message": f"no weight update group {name}"})
        options = dist.BroadcastOptions()
        options.rootRank = 0
        if p.get("load_format") == "flattened_bucket":  # one broadcast of the whole bucket
            try:
                flat, received = _flattened_bucket(p["names"], p["dtypes"], p["shapes"])
            except ValueError as err:  # the scheduler's words around the receiver's
                raise _HTTPError(400, _refused(f"Failed to receive weights: {err}")) from err
            self._groups[name].broadcast([flat], options).wait()
            self._load(received)
            return
        received = []  # any other load_format: one broadcast per tensor, as SGLang
        for param, dtype, shape in zip(p["names"], p["dtypes"], p["shapes"]):
            tensor = torch.empty(shape, dtype=getattr(torch, dtype))
            self._groups[name].broadcast([tensor], options).wait()
            received.append((param, tensor))
        self._load(received)

    def _load_disk(self, p: dict) -> None:
        from safetensors.torch import load_file

        shards = sorted(Path(p["model_path"]).glob("*.safetensors"))
        if not shards:
            raise _HTTPError(
                400, {"success": False, "message": f"no safetensors in {p['model_path']}"}
            )
        named = []
        for shard in shards:
            named += list(load_file(shard).items())
        self._load(named)

    # ---- dispatch --------------------------------------------------------------------------

    def _dispatch(self, method: str, route: str, payload: dict | None):
        if route in self.failures:
            raise _HTTPError(*self.failures[route])
        if route in ("/health", "/health_generate"):
            return 200, ""
        if route == "/get_model_info":
            return 200, {
                "model_path": "fake",
                "tokenizer_path": None,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": self.weight_version,
            }
        if route == "/get_server_info":
            return 200, {
                "model_path": "fake",
                "tp_size": self.tp_size,
                "skip_tokenizer_init": True,
                "version": "fake",
            }
        if route == "/workers" and self.router_workers is not None:  # sglang-router > 0.2.1
            return 200, {
                "workers": [{"url": url} for url in self.router_workers],
                "total": len(self.router_workers),
            }
        if route not in ROUTE_FIELDS:
            raise _HTTPError(404, {"detail": "Not Found"})
        payload = payload or {}
        unknown = set(payload) - ROUTE_FIELDS[route]
        missing = REQUIRED_FIELDS.get(route, set()) - set(payload)
        if unknown or missing:
            raise _HTTPError(
                400,
                {
                    "error": {
                        "message": f"unknown fields {sorted(unknown)}, "
                        f"missing fields {sorted(missing)}"
                    }
                },
            )
        if route == "/generate":
            return 200, self._generate(payload)
        if route == "/flush_cache":
            if self.in_flight:
                return 400, "Cache not flushed: requests are running.\n"
            return 200, "Cache flushed.\nPlease check backend logs for more details.\n"
        if route == "/pause_generation":
            self.paused = True
            return 200, {"message": "Generation paused successfully.", "status": "ok"}
        if route == "/continue_generation":
            self.paused = False
            return 200, {"message": "Generation continued successfully.", "status": "ok"}
        if route in ("/release_memory_occupation", "/resume_memory_occupation"):
            return 200, None
        if route == "/begin_weight_update":
            if self.session_open:
                raise _HTTPError(400, _refused(SESSION_ALREADY_OPEN))
            self.session_open = True
            return 200, {"success": True, "message": "Success"}
        if route == "/end_weight_update":
            if not self.session_open:
                raise _HTTPError(400, _refused(NO_SESSION_TO_END))
            self.session_open = False
            return 200, {"success": True, "message": "Success"}
        if route in SESSION_ROUTES and not self.session_open:
            raise _HTTPError(400, _refused(f"{route[1:]} {OUTSIDE_SESSION}"))
        if route == "/update_weights_from_tensor":
            entries = payload["serialized_named_tensors"]
            if len(entries) != self.tp_size:
                raise _HTTPError(
                    400,
                    {
                        "success": False,
                        "message": f"{len(entries)} payloads for tp_size {self.tp_size}",
                    },
                )
            self._load(pickle_deserializer(entries[0]))
        elif route == "/init_weights_update_group":
            self._join_group(payload)
            return 200, {
                "success": True,
                "message": "Succeeded to initialize custom process group.",
            }
        elif route == "/destroy_weights_update_group":
            self._groups.pop(payload.get("group_name", "weight_update_group"), None)
            return 200, {"success": True, "message": "Succeeded to destroy custom process group."}
        elif route == "/update_weights_from_distributed":
            self._receive(payload)
        elif route == "/update_weights_from_disk":
            self._load_disk(payload)
        if payload.get("weight_version") is not None:
            self.weight_version = payload["weight_version"]
        return 200, {"success": True, "message": "Succeeded to update model weights."}

    def _handler_class(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _serve(self, method: str):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                payload = json.loads(raw) if raw else None
                route = self.path.split("?", 1)[0]
                with fake._lock:
                    fake.calls.append((route, payload))
                    is_generate = route == "/generate"
                    if is_generate:
                        fake.in_flight += 1
                        fake.peak_in_flight = max(fake.peak_in_flight, fake.in_flight)
                try:
                    if is_generate and fake.generate_delay_s:
                        time.sleep(fake.generate_delay_s)  # lets concurrent requests overlap
                    status, body = fake._dispatch(method, route, payload)
                except _HTTPError as err:
                    status, body = err.status, err.body
                except Exception as err:  # noqa: BLE001 - a bug or a bad payload: answer as FastAPI
                    status, body = 500, {"error": {"message": f"{type(err).__name__}: {err}"}}
                finally:
                    if is_generate:
                        with fake._lock:
                            fake.in_flight -= 1
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header(
                    "Content-Type", "text/plain" if isinstance(body, str) else "application/json"
                )
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

        return Handler
