"""A thin, typed client for the SGLang HTTP routes hyrl uses (sglang==0.5.23's native API).

    client = SGLangClient("http://127.0.0.1:30000", timeout_s=600.0)
    generations = client.generate_batch(prompts, SamplingParams(64, 1.0), stop_token_ids=[1],
                                        concurrency=128)

Semantics:

* One method per route, plain Python types in and out. Every failure (connection refused, timeout,
  HTTP status >= 400, a weight route answering ``{"success": false}``, a malformed body) raises
  ``SGLangError`` naming the URL, the route, the HTTP status and the first 500 characters of the
  response body.
* ``generate_batch`` sends ONE ``/generate`` request per prompt (token ids in, token ids out; the
  server is launched with ``--skip-tokenizer-init``), at most ``concurrency`` in flight at a time
  (a thread pool of that size), and returns ``Generation``s in input order.
* Tokens and log-probs come from ``meta_info.output_token_logprobs``, a list of
  ``[logprob, token_id, text_or_null]`` with one entry per generated token. When SGLang stops on a
  stop token the token is the last entry (and the last of ``output_ids``), so ``response_ids`` end
  with it when ``finish_reason == "stop"`` and there is one log-prob per response id - the same
  convention as ``HFRolloutEngine``. SGLang's log-probs are those of softmax(logits / T) (of
  softmax(logits) when greedy), before top-p truncation, unless the server runs with
  ``SGLANG_RETURN_ORIGINAL_LOGPROB=1``.
* ``meta_info.finish_reason`` is ``{"type": "stop", "matched": id}`` or
  ``{"type": "length", "length": n}``; an ``"abort"`` (the request was aborted, e.g. by
  ``pause_generation(mode="abort")`` during a rollout) raises ``SGLangError``.
* ``flush_cache`` is refused (HTTP 400) while requests are running; it is retried every
  ``retry_interval_s`` until ``deadline_s``.
* With ``return_routed_experts`` (rollout routing replay) every /generate request carries
  ``"return_routed_experts": true`` and the answer's ``meta_info.routed_experts`` - base64 of
  int32 little-endian expert ids, one row per token that went through the model
  (``prompt_tokens + completion_tokens - 1``), ``num_moe_layers x moe_top_k`` ids per row - becomes
  ``Generation.routed_experts`` (int16 [rows, num_moe_layers, moe_top_k]: half the bytes through
  Ray's object store; an id beyond int16 is refused). The server must run
  with ``--enable-return-routed-experts``; without it SGLang leaves the key out, which raises.

Only the standard library and torch (which ``Generation`` holds) are used.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from hyrl.rollout.base import GENERATION_PROGRESS, Generation, SamplingParams

BODY_PREVIEW_CHARS = 500


class SGLangError(RuntimeError):
    """An SGLang server or route failed; the message says which and what to do."""


INT16_MAX = torch.iinfo(torch.int16).max


def timed_out(error: BaseException) -> bool:
    """Whether `error` (or an error it was raised from) is a request deadline that passed."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, TimeoutError):
            return True
        reason = getattr(current, "reason", None)  # urllib's URLError wraps a connect timeout
        if isinstance(reason, TimeoutError):
            return True
        current = current.__cause__ or current.__context__
    return False


class SGLangClient:
    def __init__(
        self,
        base_url: str,
        timeout_s: float = 600.0,
        *,
        return_routed_experts: bool = False,
        num_moe_layers: int | None = None,
        moe_top_k: int | None = None,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"SGLang base_url must start with http:// or https://, got {base_url!r}"
            )
        if return_routed_experts and not (
            isinstance(num_moe_layers, int)
            and num_moe_layers >= 1
            and isinstance(moe_top_k, int)
            and moe_top_k >= 1
        ):
            raise ValueError(
                "return_routed_experts needs num_moe_layers and moe_top_k (integers "
                f">= 1) to shape the ids, got {num_moe_layers!r} and {moe_top_k!r}"
            )
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.return_routed_experts = return_routed_experts
        self.num_moe_layers, self.moe_top_k = num_moe_layers, moe_top_k
        self.last_request_latencies_s: list[float] = []  # of the latest generate_batch

    # ---- transport -------------------------------------------------------------------------

    def request(
        self, method: str, route: str, payload: dict | None = None, timeout_s: float | None = None
    ) -> tuple[int, str]:
        """(HTTP status, body text) of one call; raises SGLangError only if no answer came back."""
        url = self.base_url + route
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(
            url, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as response:
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as err:  # a status >= 400 still carries the server's body
            return err.code, err.read().decode(errors="replace")
        except (urllib.error.URLError, OSError) as err:
            raise SGLangError(
                f"SGLang {method} {url} failed before any answer: {err}. Is the server running and "
                f"reachable at {self.base_url}? Check its log."
            ) from err

    def _call(
        self,
        method: str,
        route: str,
        payload: dict | None = None,
        timeout_s: float | None = None,
        hint: str = "",
    ) -> Any:
        status, body = self.request(method, route, payload, timeout_s)
        if status >= 400:
            raise self.error(route, status, body, hint)
        try:
            parsed = json.loads(body) if body.strip() else None
        except json.JSONDecodeError:
            parsed = body  # /flush_cache and a few others answer plain text
        # Weight routes answer 200 with {"success": false} in some versions, 400 in others.
        if isinstance(parsed, dict) and parsed.get("success") is False:
            raise self.error(route, status, body, hint)
        return parsed

    def error(self, route: str, status: int | None, body: str, hint: str = "") -> SGLangError:
        preview = body[:BODY_PREVIEW_CHARS]
        return SGLangError(
            f"SGLang {self.base_url}{route} failed (HTTP {status}): {preview!r}"
            + (f". {hint}" if hint else ". See the server log for the traceback.")
        )

    # ---- health and info -------------------------------------------------------------------

    def health(self, timeout_s: float = 5.0) -> bool:
        """True when GET /health answers 200 (the server is up); False otherwise, never raises."""
        return self._is_ok("/health", timeout_s)

    def health_generate(self, timeout_s: float = 30.0) -> bool:
        """True when GET /health_generate answers 200: the server generated a token."""
        return self._is_ok("/health_generate", timeout_s)

    def _is_ok(self, route: str, timeout_s: float) -> bool:
        try:
            status, _ = self.request("GET", route, timeout_s=timeout_s)
        except SGLangError:
            return False
        return status == 200

    def get_model_info(self) -> dict:
        """{"model_path", "tokenizer_path", "is_generation", "weight_version", ...}."""
        return self._call("GET", "/get_model_info")

    def get_server_info(self) -> dict:
        """The server's ServerArgs as a dict, plus scheduler info and "version"."""
        return self._call("GET", "/get_server_info")

    # ---- scheduling control ----------------------------------------------------------------

    def flush_cache(self, deadline_s: float = 60.0, retry_interval_s: float = 0.5) -> None:
        """Drop the radix (prefix) cache so no KV computed with old weights is reused."""
        give_up_at = time.monotonic() + deadline_s
        while True:
            status, body = self.request("POST", "/flush_cache")
            if status == 200:
                return
            if status != 400 or time.monotonic() >= give_up_at:  # 400: requests still running
                raise self.error(
                    "/flush_cache",
                    status,
                    body,
                    f"Requests were still running after {deadline_s:.0f} s; pause "
                    "generation (mode='abort' or 'retract') before flushing",
                )
            time.sleep(retry_interval_s)

    def pause_generation(self, mode: str = "abort") -> dict:
        """Stop scheduling; mode "abort" (SGLang's default) aborts in-flight requests."""
        return self._call("POST", "/pause_generation", {"mode": mode})

    def continue_generation(self) -> dict:
        return self._call("POST", "/continue_generation", {})

    def release_memory_occupation(self, tags: Sequence[str] | None = None) -> None:
        """Free the server's weights and KV cache on the GPU (needs --enable-memory-saver)."""
        self._call(
            "POST",
            "/release_memory_occupation",
            {"tags": list(tags) if tags is not None else None},
            hint="Was the server launched with --enable-memory-saver (colocated mode)?",
        )

    def resume_memory_occupation(self, tags: Sequence[str] | None = None) -> None:
        self._call(
            "POST",
            "/resume_memory_occupation",
            {"tags": list(tags) if tags is not None else None},
            hint="Was the server launched with --enable-memory-saver (colocated mode)?",
        )

    # ---- weight updates --------------------------------------------------------------------

    def begin_weight_update(self, selector: str = "all") -> dict:
        """Open SGLang's weight-update session (0.5.23 refuses tensor and distributed updates
        outside one); ``selector`` is "target", "draft" or "all" runners."""
        return self._call(
            "POST",
            "/begin_weight_update",
            {"selector": selector},
            hint="A session may already be open (an earlier sync died before "
            "/end_weight_update); restart the server or post /end_weight_update",
        )

    def end_weight_update(self) -> dict:
        """Close the session: SGLang post-processes the loaded weights (e.g. repacks them)."""
        return self._call("POST", "/end_weight_update", {})

    def update_weights_from_tensor(
        self,
        serialized_named_tensors: Sequence[str],
        load_format: str | None = None,
        flush_cache: bool = False,
        weight_version: str | None = None,
    ) -> dict:
        """One serialized [(name, tensor), ...] per TP rank of the engine (index = tp rank)."""
        payload: dict[str, Any] = {
            "serialized_named_tensors": list(serialized_named_tensors),
            "load_format": load_format,
            "flush_cache": flush_cache,
        }
        if weight_version is not None:
            payload["weight_version"] = weight_version
        return self._call(
            "POST",
            "/update_weights_from_tensor",
            payload,
            hint="Tensor sync needs the trainer and the server on the same node "
            "(CUDA IPC) and names the model's load_weights knows",
        )

    def init_weights_update_group(
        self,
        master_address: str,
        master_port: int,
        rank_offset: int,
        world_size: int,
        group_name: str,
        backend: str = "nccl",
    ) -> dict:
        """Make the server's TP ranks join ranks rank_offset.. of the trainer's broadcast group."""
        return self._call(
            "POST",
            "/init_weights_update_group",
            {
                "master_address": master_address,
                "master_port": master_port,
                "rank_offset": rank_offset,
                "world_size": world_size,
                "group_name": group_name,
                "backend": backend,
            },
            hint=f"Can the server reach {master_address}:{master_port}?",
        )

    def destroy_weights_update_group(self, group_name: str) -> dict:
        return self._call("POST", "/destroy_weights_update_group", {"group_name": group_name})

    def update_weights_from_distributed(
        self,
        names: Sequence[str],
        dtypes: Sequence[str],
        shapes: Sequence[Sequence[int]],
        group_name: str,
        flush_cache: bool = False,
        weight_version: str | None = None,
        load_format: str | None = None,
    ) -> dict:
        """Receive these tensors, in this order, broadcast from rank 0 of group_name: one
        broadcast per tensor, or with load_format="flattened_bucket" one broadcast of them all
        packed back to back (hyrl.rollout.sglang.receive.distributed.flat_bucket)."""
        payload: dict[str, Any] = {
            "names": list(names),
            "dtypes": list(dtypes),
            "shapes": [list(s) for s in shapes],
            "group_name": group_name,
            "flush_cache": flush_cache,
        }
        if weight_version is not None:
            payload["weight_version"] = weight_version
        if load_format is not None:
            payload["load_format"] = load_format
        return self._call("POST", "/update_weights_from_distributed", payload)

    def update_weights_from_disk(
        self, model_path: str, load_format: str | None = None, weight_version: str | None = None
    ) -> dict:
        """Reload the weights from an HF checkpoint directory the server can read. SGLang
        flushes after a disk update unless told not to; the sync flushes once, after all
        servers, as in the other modes."""
        payload: dict[str, Any] = {"model_path": model_path, "flush_cache": False}
        if load_format is not None:
            payload["load_format"] = load_format
        if weight_version is not None:
            payload["weight_version"] = weight_version
        return self._call(
            "POST",
            "/update_weights_from_disk",
            payload,
            hint=f"Is {model_path} on a file system the server can read?",
        )

    # ---- generation ------------------------------------------------------------------------

    def generate(
        self, input_ids: Sequence[int], sampling_params: dict, return_logprob: bool = True
    ) -> dict:
        """The raw /generate answer for one prompt: {"output_ids", "meta_info", ...}."""
        payload = {
            "input_ids": list(input_ids),
            "sampling_params": sampling_params,
            "return_logprob": return_logprob,
        }
        if self.return_routed_experts:  # only when asked: the ids cost the server a copy per token
            payload["return_routed_experts"] = True
        return self._call("POST", "/generate", payload)

    def generate_batch(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        stop_token_ids: Sequence[int],
        concurrency: int,
    ) -> list[Generation]:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        sampling_params = to_sglang_sampling_params(params, stop_token_ids)

        latencies = [0.0] * len(prompts)

        def one(index: int) -> Generation:
            began = time.perf_counter()
            answer = self.generate(prompts[index], sampling_params)
            latencies[index] = time.perf_counter() - began
            generation = self.to_generation(prompts[index], answer)
            GENERATION_PROGRESS.add(1)
            return generation

        if not prompts:
            self.last_request_latencies_s = []
            return []
        with ThreadPoolExecutor(
            max_workers=min(concurrency, len(prompts)), thread_name_prefix="sglang-generate"
        ) as pool:
            generations = list(pool.map(one, range(len(prompts))))  # map keeps input order
        self.last_request_latencies_s = latencies  # seconds from send to answer, per prompt
        return generations

    def to_generation(self, prompt: Sequence[int], answer: dict) -> Generation:
        meta = answer.get("meta_info") if isinstance(answer, dict) else None
        pairs = meta.get("output_token_logprobs") if isinstance(meta, dict) else None
        if pairs is None:
            raise self.error(
                "/generate",
                200,
                json.dumps(answer),
                "The answer has no meta_info.output_token_logprobs; hyrl sends "
                "return_logprob=true, so this SGLang version's format differs",
            )
        assert isinstance(meta, dict), "output_token_logprobs was read from it"
        response_ids = [int(item[1]) for item in pairs]
        log_probs = [float(item[0]) for item in pairs]
        output_ids = answer.get("output_ids")
        if output_ids is not None and list(output_ids) != response_ids:
            raise self.error(
                "/generate",
                200,
                json.dumps(answer),
                "output_ids and output_token_logprobs disagree; hyrl needs one "
                "log-prob per response token",
            )
        finish = meta.get("finish_reason")
        kind = finish.get("type") if isinstance(finish, dict) else finish
        if kind == "length":
            finish_reason = "length"
        elif kind == "stop":
            finish_reason = "stop"
            matched = finish.get("matched") if isinstance(finish, dict) else None
            if isinstance(matched, int) and (not response_ids or response_ids[-1] != matched):
                raise self.error(
                    "/generate",
                    200,
                    json.dumps(answer),
                    f"Stopped on token {matched} but it is not the last response "
                    "token; hyrl expects the stop token kept (no_stop_trim)",
                )
        elif kind == "abort":
            raise self.error(
                "/generate",
                200,
                json.dumps(answer),
                "The request was aborted (pause_generation or abort_request during "
                "the rollout, or the server ran out of memory); rerun the rollout",
            )
        else:
            raise self.error(
                "/generate", 200, json.dumps(answer), f"Unknown finish_reason {finish!r}"
            )
        routed_experts = (
            self.decode_routed_experts(answer, len(prompt) + len(response_ids) - 1)
            if self.return_routed_experts
            else None
        )
        return Generation(
            prompt_ids=list(prompt),
            response_ids=response_ids,
            response_log_probs=log_probs,
            finish_reason=finish_reason,
            routed_experts=routed_experts,
        )

    def decode_routed_experts(self, answer: dict, default_rows: int) -> torch.Tensor:
        """meta_info.routed_experts (base64 int32 LE) -> int16 [rows, layers, top-k], a copy
        (int16 before the ids leave the engine actor: at 30B they are the rollout's largest
        part, and the trainer keeps them as int16 anyway).

        rows must be prompt_tokens + completion_tokens - 1 of meta_info (default_rows, from the
        token lists, when the answer does not say).
        """
        layers, top_k = self.num_moe_layers, self.moe_top_k
        assert layers is not None and top_k is not None, "__init__ refuses routed experts without"
        meta = answer["meta_info"]
        encoded = meta.get("routed_experts")
        body = json.dumps(
            {
                **answer,
                "meta_info": {  # the ids themselves would fill the preview
                    **meta,
                    "routed_experts": f"<{len(encoded)} characters>"
                    if isinstance(encoded, str)
                    else encoded,
                },
            }
        )
        if encoded is None:
            raise self.error(
                "/generate",
                200,
                body,
                "The answer has no meta_info.routed_experts although hyrl sent "
                "return_routed_experts=true (--use-rollout-routing-replay): start the server "
                "with --enable-return-routed-experts, or, behind a router, check that "
                "every worker was started with it",
            )
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (TypeError, ValueError) as err:  # binascii.Error is a ValueError
            raise self.error(
                "/generate", 200, body, f"meta_info.routed_experts is not base64 ({err})"
            ) from err
        row_bytes = 4 * layers * top_k  # int32 ids
        if len(raw) % row_bytes:
            raise self.error(
                "/generate",
                200,
                body,
                f"meta_info.routed_experts has {len(raw)} bytes, not a whole number "
                f"of rows of {self.num_moe_layers} MoE layers x top-{self.moe_top_k} "
                f"int32 ids ({row_bytes} bytes); do the server's model and hyrl's "
                "--num-layers / --moe-router-topk agree?",
            )
        rows = len(raw) // row_bytes
        prompt_tokens, completion_tokens = meta.get("prompt_tokens"), meta.get("completion_tokens")
        expected_rows = (
            prompt_tokens + completion_tokens - 1
            if isinstance(prompt_tokens, int) and isinstance(completion_tokens, int)
            else default_rows
        )
        if rows != expected_rows:
            raise self.error(
                "/generate",
                200,
                body,
                f"meta_info.routed_experts has {rows} rows of {self.num_moe_layers} "
                f"layers x top-{self.moe_top_k}, but prompt_tokens + "
                f"completion_tokens - 1 = {expected_rows} tokens went through the "
                "model; do the model's layer count and top-k match the server's?",
            )
        if rows != default_rows:  # the ids are placed by hyrl's own token counts
            raise self.error(
                "/generate",
                200,
                body,
                f"meta_info.routed_experts has {rows} rows, but the prompt sent and "
                f"the response returned make {default_rows} tokens (prompt + "
                "response - 1): the server counted other tokens than it returned",
            )
        # bytearray: a writable copy, so the tensor owns its memory; SGLang writes little-endian
        ids = (
            torch.frombuffer(bytearray(raw), dtype=torch.int32)
            if raw
            else torch.empty(0, dtype=torch.int32)
        )
        if ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) <= INT16_MAX):
            raise self.error(
                "/generate",
                200,
                body,
                f"meta_info.routed_experts holds expert ids {int(ids.min())}..{int(ids.max())}: "
                f"hyrl keeps them as int16 (0..{INT16_MAX}); does the server run the same model?",
            )
        return ids.to(torch.int16).view(rows, layers, top_k)


def to_sglang_sampling_params(params: SamplingParams, stop_token_ids: Sequence[int]) -> dict:
    """hyrl SamplingParams -> SGLang's sampling_params JSON (temperature 0 decodes greedily);
    it stops at the engine's `stop_token_ids` and at the call's own (`params.stop_token_ids`)."""
    return {
        "max_new_tokens": params.max_new_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": -1,  # SGLang's "no top-k"; hyrl samples from the full (top-p) distribution
        "stop_token_ids": list(dict.fromkeys([*stop_token_ids, *params.stop_token_ids])),
        "skip_special_tokens": False,
        "no_stop_trim": True,  # keep the stop token: it is trained on and has a log-prob
    }
