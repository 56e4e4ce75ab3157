"""MoCo maths: momentum update, logits and loss, the queue; against hand values and Algorithm 1 itself."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from moco_core.model.encoders import build_encoder
from moco_core.model.moco import MoCo, contrastive_logits


def tiny_encoder(dim: int = 4) -> nn.Module:
    """No BN, so the key forward does not depend on the batch and Algorithm 1 can be replayed exactly."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(2 * 3 * 3, 8), nn.ReLU(), nn.Linear(8, dim))


def test_key_encoder_starts_as_exact_copy_without_gradients() -> None:
    moco = MoCo(build_encoder("resnet18", dim=16, mlp=True), dim=16, queue_size=8)
    q_state, k_state = moco.encoder.state_dict(), moco.momentum_encoder.state_dict()
    assert q_state.keys() == k_state.keys()
    for name in q_state:
        assert torch.equal(q_state[name], k_state[name]), name
        assert q_state[name].data_ptr() != k_state[name].data_ptr(), f"{name} is shared, not copied"
    assert all(p.requires_grad for p in moco.encoder.parameters())
    assert not any(p.requires_grad for p in moco.momentum_encoder.parameters())
    moco.train()
    x = torch.randn(4, 3, 32, 32)
    logits, labels, _ = moco(x, x.clone())
    F.cross_entropy(logits, labels).backward()
    assert all(p.grad is None for p in moco.momentum_encoder.parameters())
    assert all(p.grad is not None for p in moco.encoder.parameters())


@pytest.mark.parametrize("m", [0.0, 0.9, 0.999, 1.0])
def test_momentum_update_follows_the_formula(m: float) -> None:
    moco = MoCo(tiny_encoder(), dim=4, queue_size=6, momentum=m, shuffle_keys=False)
    with torch.no_grad():
        for p in moco.encoder.parameters():
            p.add_(torch.randn_like(p))  # make theta_q differ from theta_k
    before_k = [p.clone() for p in moco.momentum_encoder.parameters()]
    q = [p.clone() for p in moco.encoder.parameters()]
    moco.momentum_update()
    for k0, qp, k1 in zip(before_k, q, moco.momentum_encoder.parameters(), strict=True):
        assert torch.allclose(k1, m * k0 + (1 - m) * qp, atol=1e-7)
        if m == 0.0:
            assert torch.equal(k1, qp)  # m = 0 copies exactly
        if m == 1.0:
            assert torch.equal(k1, k0)  # m = 1 keeps exactly


def test_loss_against_hand_computed_values() -> None:
    # q = k+ and every negative orthogonal to q: l_pos = 1, l_neg = 0.
    # loss = -log(e^(1/T) / (e^(1/T) + K)); with T = 0.5, K = 3: -log(e^2 / (e^2 + 3)) = log(1 + 3 e^-2) = 0.340753
    q = torch.tensor([[1.0, 0.0, 0.0]])
    queue = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.6], [0.0, 1.0, 0.8]])  # unit columns, all orthogonal to q
    logits, labels = contrastive_logits(q, q.clone(), queue, temperature=0.5)
    assert logits.shape == (1, 4)
    assert torch.allclose(logits, torch.tensor([[2.0, 0.0, 0.0, 0.0]]))
    assert labels.tolist() == [0]
    assert F.cross_entropy(logits, labels).item() == pytest.approx(-math.log(math.e**2 / (math.e**2 + 3)))
    assert F.cross_entropy(logits, labels).item() == pytest.approx(0.340753, abs=1e-6)
    # All logits equal: the loss is log(1 + K) (chance), whatever T.
    logits, labels = contrastive_logits(q, torch.tensor([[0.0, 1.0, 0.0]]), queue, temperature=0.07)
    assert F.cross_entropy(logits, labels).item() == pytest.approx(math.log(4))


def test_logits_match_a_per_element_transcription() -> None:
    torch.manual_seed(1)
    n, c, k, t = 5, 8, 7, 0.07
    q = F.normalize(torch.randn(n, c), dim=1)
    key = F.normalize(torch.randn(n, c), dim=1)
    queue = F.normalize(torch.randn(c, k), dim=0)
    logits, labels = contrastive_logits(q, key, queue, temperature=t)
    total = 0.0
    for i in range(n):
        pos = sum(q[i, j].item() * key[i, j].item() for j in range(c)) / t
        negs = [sum(q[i, j].item() * queue[j, col].item() for j in range(c)) / t for col in range(k)]
        assert logits[i, 0].item() == pytest.approx(pos, rel=1e-5)
        assert logits[i, 1:].tolist() == pytest.approx(negs, rel=1e-4, abs=1e-5)
        total += -pos + math.log(sum(math.exp(v) for v in [pos, *negs]))
    assert F.cross_entropy(logits, labels).item() == pytest.approx(total / n, rel=1e-5)


def naive_enqueue(queue: torch.Tensor, ptr: int, keys: torch.Tensor) -> tuple[torch.Tensor, int]:
    """One key at a time into a ring buffer: the obvious FIFO."""
    queue = queue.clone()
    for key in keys:
        queue[:, ptr] = key
        ptr = (ptr + 1) % queue.shape[1]
    return queue, ptr


@pytest.mark.parametrize(("queue_size", "batches"), [(8, [4, 4, 4]), (10, [4, 4, 4, 4]), (5, [3, 7, 2]), (6, [6])])
def test_queue_is_fifo_with_wrap_around(queue_size: int, batches: list[int]) -> None:
    moco = MoCo(tiny_encoder(), dim=4, queue_size=queue_size, shuffle_keys=False)
    ref, ptr = moco.queue.clone(), 0
    counter = 0
    for b in batches:
        keys = torch.arange(counter, counter + b, dtype=torch.float32).unsqueeze(1).repeat(1, 4)  # key i = [i]*4
        counter += b
        moco.enqueue(keys)
        ref, ptr = naive_enqueue(ref, ptr, keys)
        assert torch.equal(moco.queue, ref)
        assert moco.queue_ptr.tolist() == [ptr]
        assert moco.queue_ptr.dtype == torch.long and moco.queue_ptr.shape == (1,)
    # The queue holds exactly the newest min(K, total) keys.
    newest = set(range(max(0, counter - queue_size), counter))
    assert newest <= {int(v) for v in moco.queue[0].tolist()}


def test_initial_queue_is_random_and_normalised() -> None:
    moco = MoCo(tiny_encoder(), dim=4, queue_size=32, shuffle_keys=False)
    assert moco.queue.shape == (4, 32)
    assert torch.allclose(moco.queue.norm(dim=0), torch.ones(32), atol=1e-6)
    assert moco.queue.std() > 0.1


def test_training_matches_algorithm_1() -> None:
    """Three SGD steps of MoCo against a straight transcription of the paper's Algorithm 1 pseudocode."""
    n, dim, queue_size, m, t, lr = 3, 4, 5, 0.9, 0.2, 0.5
    torch.manual_seed(3)
    batches = [(torch.randn(n, 2, 3, 3), torch.randn(n, 2, 3, 3)) for _ in range(3)]

    moco = MoCo(tiny_encoder(dim), dim=dim, queue_size=queue_size, momentum=m, temperature=t, shuffle_keys=False)
    f_q, f_k = copy.deepcopy(moco.encoder), copy.deepcopy(moco.encoder)  # f_k.params = f_q.params
    queue = moco.queue.clone()
    opt = torch.optim.SGD(moco.parameters(), lr=lr, momentum=0.9)
    ref_opt = torch.optim.SGD(f_q.parameters(), lr=lr, momentum=0.9)
    for x_q, x_k in batches:
        logits, labels, keys = moco(x_q, x_k)
        loss = F.cross_entropy(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        moco.enqueue(keys)

        # --- Algorithm 1, line by line ---
        q = F.normalize(f_q(x_q), dim=1)  # N x C
        k = F.normalize(f_k(x_k), dim=1).detach()  # N x C
        l_pos = torch.bmm(q.view(n, 1, dim), k.view(n, dim, 1)).view(n, 1)
        l_neg = torch.mm(q.view(n, dim), queue.view(dim, queue_size))
        ref_logits = torch.cat([l_pos, l_neg], dim=1)
        ref_loss = nn.CrossEntropyLoss()(ref_logits / t, torch.zeros(n, dtype=torch.long))
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        with torch.no_grad():
            for pk, pq in zip(f_k.parameters(), f_q.parameters(), strict=True):
                pk.copy_(m * pk + (1 - m) * pq)
        queue, _ = naive_enqueue(queue, int(moco.queue_ptr.item() - n) % queue_size, k)

        assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5)
        assert torch.allclose(moco.queue, queue, atol=1e-6)
    # Our momentum update runs before the next key forward; the pseudocode's after the SGD step. Same thing.
    moco.momentum_update()
    for ours, ref in zip(moco.momentum_encoder.parameters(), f_k.parameters(), strict=True):
        assert torch.allclose(ours, ref, atol=1e-6)
    for ours, ref in zip(moco.encoder.parameters(), f_q.parameters(), strict=True):
        assert torch.allclose(ours, ref, atol=1e-6)


def test_empty_queue_leaves_unwritten_slots_out_of_the_logits() -> None:
    """queue_init="empty": the negatives are exactly the keys written so far; once full, the plain logits."""
    n, dim, queue_size, t = 2, 4, 5, 0.2
    torch.manual_seed(5)
    moco = MoCo(tiny_encoder(dim), dim=dim, queue_size=queue_size, momentum=0.9, temperature=t,
                shuffle_keys=False, queue_init="empty")
    assert torch.equal(moco.queue, torch.zeros(dim, queue_size))
    written: list[torch.Tensor] = []  # every key enqueued so far, oldest first
    for step in range(4):
        x_q, x_k = torch.randn(n, 2, 3, 3), torch.randn(n, 2, 3, 3)
        logits, labels, keys = moco(x_q, x_k)
        loss = F.cross_entropy(logits, labels)
        q = F.normalize(moco.encoder(x_q), dim=1).detach()
        negatives = written[-queue_size:]
        # Independent reference: -log(e^(q.k+/T) / (e^(q.k+/T) + sum over the written keys of e^(q.k/T))).
        for i in range(n):
            pos = math.exp(float(q[i] @ keys[i]) / t)
            neg = sum(math.exp(float(q[i] @ key) / t) for key in negatives)
            assert F.cross_entropy(logits[i:i + 1], labels[i:i + 1]).item() == pytest.approx(
                -math.log(pos / (pos + neg)), rel=1e-5)
        assert int(torch.isfinite(logits[0]).sum()) == 1 + len(negatives)  # slots written so far: 0, 2, 4, 5, 5
        if step == 0:
            assert loss.item() == 0.0  # no negatives yet: nothing to push the query away from
        if len(negatives) == queue_size:
            plain, _ = contrastive_logits(q, keys, moco.queue, t)
            assert torch.allclose(logits, plain, atol=1e-5)
        loss.backward()
        moco.enqueue(keys)
        written += list(keys)


def test_queue_init_must_be_random_or_empty() -> None:
    with pytest.raises(ValueError, match="queue_init must be 'random' or 'empty', got 'zeros'"):
        MoCo(tiny_encoder(), dim=4, queue_size=4, queue_init="zeros")


def test_loading_a_queue_with_unwritten_slots_masks_them_again() -> None:
    moco = MoCo(tiny_encoder(), dim=4, queue_size=4, shuffle_keys=False, queue_init="empty")
    moco.enqueue(F.normalize(torch.randn(4, 4), dim=1))  # full: nothing left to mask
    moco.load_state_dict(MoCo(tiny_encoder(), dim=4, queue_size=4, queue_init="empty").state_dict())
    x = torch.randn(2, 2, 3, 3)
    logits, _, _ = moco(x, x.clone())
    assert torch.isfinite(logits).sum(dim=1).tolist() == [1, 1]
