"""The engine's expert ids reach the trainer's device before the routers and the routing
comparison see them. They are held in host memory (RoutedExperts) until a micro-batch runs;
on an H100 the comparison met CPU ids against cuda:0 response positions and the run stopped.
Here the "meta" device stands in for the GPU: no real CPU run can show a second device."""

from types import SimpleNamespace

import torch

from hyrl.algorithms.batch import RoutedExperts
from hyrl.backends.megatron.actor import MegatronActor
from hyrl.backends.megatron.trained_model import MegatronTrainedModel


def test_engine_routing_puts_ids_and_positions_on_the_trainer_device():
    ids = torch.tensor([[[0, 1]], [[2, 3]]], dtype=torch.int16)  # 2 positions, 1 layer, top-2
    routed = RoutedExperts([(1, ids), (0, ids[:1])], seq_len=4, layers=1, top_k=2)
    loss_mask = torch.tensor([[0, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.float32)
    actor = SimpleNamespace(
        device=torch.device("meta"), packed_like=MegatronTrainedModel.packed_like
    )
    mb = SimpleNamespace(routed_experts=routed, loss_mask=loss_mask, packing=None)

    engine_ids, responses = MegatronActor._engine_routing(actor, mb)

    assert engine_ids.device.type == "meta" and responses.device.type == "meta"
    assert engine_ids.shape == (2, 4, 1, 2) and engine_ids.dtype == torch.int16
    assert responses.shape == (2, 4) and responses.dtype == torch.bool
