"""What hyrl sends decodes into SGLang 0.5.23's request types, and the fake SGLang server in
tests/helpers knows no field, and requires none, that SGLang's types do not."""

from __future__ import annotations

import msgspec
import pydantic
import pytest
from fake_sglang_server import REQUIRED_FIELDS, ROUTE_FIELDS, SAMPLING_FIELDS
from sglang.srt.managers.io_struct import GenerateReqInput
from sglang.srt.sampling.sampling_params import SamplingParams as SGLangSamplingParams
from sglang_scheduler import CONTROL_ROUTES, WEIGHT_ROUTES, request_fields, required_fields

from hyrl.rollout.base import SamplingParams
from hyrl.rollout.sglang.client import to_sglang_sampling_params

QWEN_VOCAB = 151936
TYPED_ROUTES = {**{r: t for r, (t, _) in WEIGHT_ROUTES.items()}, **CONTROL_ROUTES}


@pytest.mark.parametrize("route", sorted(TYPED_ROUTES))
def test_the_fakes_fields_are_sglangs(route):
    type_name = TYPED_ROUTES[route]
    assert ROUTE_FIELDS[route] <= request_fields(type_name), route
    assert REQUIRED_FIELDS.get(route, set()) == required_fields(type_name), route


def test_the_fake_covers_every_route_hyrl_types():
    assert set(TYPED_ROUTES) | {"/generate", "/flush_cache"} <= set(ROUTE_FIELDS)


def test_the_generate_request_hyrl_sends_decodes_and_its_sampling_params_verify():
    sampling = to_sglang_sampling_params(
        SamplingParams(max_new_tokens=8192, temperature=1.0, top_p=1.0), [151645, 151643]
    )
    payload = {
        "input_ids": [1, 2, 3],
        "sampling_params": sampling,
        "return_logprob": True,
        "return_routed_experts": True,
    }
    request = pydantic.TypeAdapter(GenerateReqInput).validate_python(payload)
    assert request.input_ids == [1, 2, 3] and request.return_routed_experts
    params = SGLangSamplingParams(**sampling)  # a keyword SGLang lacks raises TypeError
    params.verify(QWEN_VOCAB)
    assert params.no_stop_trim and params.stop_token_ids == {151645, 151643}


def test_a_calls_own_stop_ids_reach_sglangs_sampling_params():
    # a turn that ends at a tool call's closing token: SGLang stops at the engine's ids and at
    # the call's (its SamplingParams keeps them as a set and verifies them against the vocab)
    sampling = to_sglang_sampling_params(
        SamplingParams(max_new_tokens=512, stop_token_ids=(151658,)), [151645, 151643]
    )
    params = SGLangSamplingParams(**sampling)
    params.verify(QWEN_VOCAB)
    assert params.stop_token_ids == {151645, 151643, 151658} and params.no_stop_trim


def test_the_fakes_generate_and_sampling_fields_are_sglangs():
    generate_fields = set(GenerateReqInput.__dataclass_fields__)
    assert ROUTE_FIELDS["/generate"] <= generate_fields
    assert {f.name for f in msgspec.structs.fields(SGLangSamplingParams)} >= SAMPLING_FIELDS
