"""The training-loop helpers: the top-1 accuracy shown for every method."""

import torch

from moco_core.engine import top1


def test_top1_counts_rows_whose_label_logit_is_strictly_highest():
    logits = torch.tensor([
        [3.0, 1.0, 2.0],  # label 0 highest: right
        [1.0, 3.0, 2.0],  # label 0, but 3.0 beats it: wrong
        [2.0, 2.0, 2.0],  # all tied (a collapsed encoder): wrong, though argmax picks 0
        [0.0, 5.0, 5.0],  # label 2 tied with 1: wrong
    ])
    labels = torch.tensor([0, 0, 0, 2])
    assert top1(logits, labels).item() == 25.0
    assert top1(logits[:1], labels[:1]).item() == 100.0
    assert top1(logits[1:], labels[1:]).item() == 0.0
