"""pycollect.testing's helpers for tests: the argmax MLP and batch digests."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from pycollect import ConfigError
from pycollect.testing.batches import batch_digest
from pycollect.testing.policies import argmax_mlp

# -- argmax_mlp -----------------------------------------------------------------------------------


def test_argmax_mlp_draws_the_layers_a_hand_built_mlp_would() -> None:
    torch.manual_seed(5)
    by_hand = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2))
    torch.manual_seed(5)
    act, net = argmax_mlp(4, 64, 2)
    assert str(net) == str(by_hand)
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), by_hand.state_dict().values(), strict=True))
    observation = torch.randn(7, 4)
    assert torch.equal(act({"observation": observation}), by_hand(observation).argmax(-1))


def test_argmax_mlp_of_one_layer_is_the_linear_itself() -> None:
    act, net = argmax_mlp(2, 3)
    assert isinstance(net, torch.nn.Linear) and list(net.state_dict()) == ["weight", "bias"]
    assert act({"observation": torch.zeros(5, 2)}).shape == (5,)


def test_argmax_mlp_needs_two_sizes() -> None:
    with pytest.raises(ConfigError, match="argmax_mlp"):
        argmax_mlp(4)


# -- batch_digest ---------------------------------------------------------------------------------


def _batch() -> TensorDict:
    return TensorDict(
        {"action": torch.arange(4), "next": {"reward": torch.ones(4), "done": torch.zeros(4, dtype=torch.bool)}},
        batch_size=[4],
    )


def test_batch_digest_names_every_leaf_and_is_equal_for_equal_batches() -> None:
    digest = batch_digest(_batch())
    assert sorted(digest) == ["action", "next/done", "next/reward"]
    assert batch_digest(_batch()) == digest


def test_batch_digest_changes_with_one_byte_of_one_leaf() -> None:
    changed = _batch()
    changed["next", "reward"][2] = 1.0000001
    digest, other = batch_digest(_batch()), batch_digest(changed)
    assert [key for key in digest if digest[key] != other[key]] == ["next/reward"]


def test_batch_digest_reads_non_contiguous_leaves() -> None:
    batch = _batch()
    batch["action"] = torch.arange(8)[::2]
    assert batch_digest(batch)["action"] == batch_digest(TensorDict({"action": torch.arange(0, 8, 2)}, [4]))["action"]
