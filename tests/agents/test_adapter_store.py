"""agents/adapter_store.py: users' adapters on disk, the most recent few in a bank's slots,
on a two-layer toy model (the store's bookkeeping needs no real one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from agents.adapter_store import AdapterStore
from agents.adapters import LoraSettings
from agents.multi_lora import AdapterBank

LORA = LoraSettings(rank=2, alpha=4, targets="q_proj,up_proj")


class Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.up_proj = nn.Linear(8, 8), nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up_proj(self.q_proj(x))


def adapter(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = {"q_proj": (8, 8), "up_proj": (16, 8)}
    state = {}
    for name, (out, inp) in shapes.items():
        state[f"base_model.model.{name}.lora_A.weight"] = torch.randn(2, inp, generator=g)
        state[f"base_model.model.{name}.lora_B.weight"] = torch.randn(out, 2, generator=g)
    return state


def store_of(root: Path, capacity: int) -> AdapterStore:
    store = AdapterStore(root, AdapterBank(Toy(), ["q_proj", "up_proj"], LORA, capacity))
    for i, user in enumerate("abcd"):
        store.save(user, adapter(i))
    return store


def test_least_recently_used_is_evicted_first(tmp_path: Path) -> None:
    store = store_of(tmp_path, capacity=2)
    for users, resident in [(["a"], ["a"]), (["b"], ["a", "b"]), (["a"], ["b", "a"]), (["c"], ["a", "c"])]:
        with store.lease(users):
            pass
        assert store.resident() == resident, users
    assert (store.stats.loads, store.stats.evictions) == (3, 1)
    assert store.stats.last_load_s > 0


def test_a_slot_in_flight_is_never_evicted(tmp_path: Path) -> None:
    store = store_of(tmp_path, capacity=2)
    held = store.acquire(["a"])  # the oldest, but a batch still decodes with it
    with store.lease(["b"]):
        with pytest.raises(RuntimeError, match="unpinned"):
            store.acquire(["c"])  # a and b are both in flight
    with store.lease(["c"]) as slots:
        assert store.resident() == ["a", "c"] and slots[0] != held[0]
    store.release(held)
    with store.lease(["d"]):
        assert store.resident() == ["c", "d"]


def test_a_batch_shares_slots_and_unknown_users_are_the_base(tmp_path: Path) -> None:
    store = store_of(tmp_path, capacity=2)
    with store.lease(["a", None, "a", "nobody", "b"]) as slots:
        assert slots[0] == slots[2] != 0 and slots[1] == slots[3] == 0 and slots[4] not in (0, slots[0])
        with store.lease(["a"]) as again:  # a second batch on the same user pins it twice
            assert again == [slots[0]]
        with pytest.raises(RuntimeError):
            store.acquire(["c"])  # a is still pinned by the outer lease


def test_reload_equals_what_was_saved(tmp_path: Path) -> None:
    store = store_of(tmp_path, capacity=1)
    for _ in range(2):  # loaded, evicted by b, loaded again
        for user, seed in (("a", 0), ("b", 1)):
            with store.lease([user]) as (slot,):
                got = store.bank.state(slot)
                assert got.keys() == adapter(seed).keys()
                assert all(torch.equal(got[k], v) for k, v in adapter(seed).items())
    assert all(torch.equal(store.read("c")[k], v) for k, v in adapter(2).items())
    with store.lease(["a"]) as (slot,):
        store.save("a", adapter(9))  # a training update lands while a is resident
        assert all(torch.equal(store.bank.state(slot)[k], v) for k, v in adapter(9).items())


def test_the_directory_is_what_peft_loads(tmp_path: Path) -> None:
    from peft import LoraConfig
    from peft.utils import load_peft_weights

    store = store_of(tmp_path, capacity=1)
    config = LoraConfig.from_pretrained(str(tmp_path / "a"))
    assert (config.r, config.lora_alpha, set(config.target_modules)) == (2, 4, {"q_proj", "up_proj"})
    weights = load_peft_weights(str(tmp_path / "a"))
    assert all(torch.equal(weights[k], v) for k, v in adapter(0).items())


@pytest.mark.parametrize("user", ["../x", "/abs", "", ".", "..", "a/b", ".hidden", "x\x00y", "a\\b"])
def test_a_user_id_that_could_leave_the_store_is_refused(tmp_path: Path, user: str) -> None:
    store = store_of(tmp_path / "store", capacity=1)
    with pytest.raises(ValueError, match="user id"):
        store.save(user, adapter(0))
    with pytest.raises(ValueError, match="user id"):
        store.acquire([user])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_an_adapter_of_another_shape_is_refused_before_it_is_written(tmp_path: Path) -> None:
    store = store_of(tmp_path, capacity=1)
    wrong = {k: v[:1] if "lora_A" in k else v for k, v in adapter(0).items()}
    with pytest.raises(ValueError, match="LoraSettings"):
        store.save("e", wrong)
    assert not (tmp_path / "e").exists()
