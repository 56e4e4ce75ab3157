"""The training-loop helpers: the top-1 accuracy shown for every method."""

import torch

from moco_core.run.engine import top1


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


def test_a_step_with_no_negatives_reports_none_not_a_perfect_score(shapes_root, tmp_path) -> None:
    """queue_init empty: the first step's logits hold only the positive (loss 0, top-1 100 by construction)."""
    from moco_core.config import ModelConfig
    from moco_core.model.methods import MocoMethod
    from moco_core.run.engine import train_one_epoch
    from moco_core.run.progress import MetricsWriter, Progress

    torch.manual_seed(0)
    method = MocoMethod(ModelConfig(arch="resnet18", queue_size=64, queue_init="empty", bn_groups=1),
                        world_size=1, num_classes=0, dataset_size=0)
    optimizer = torch.optim.SGD(method.module.parameters(), lr=0.01)
    views = (torch.randn(4, 3, 32, 32), torch.randn(4, 3, 32, 32))
    batch = (views, torch.zeros(4, dtype=torch.long), torch.arange(4))
    metrics = MetricsWriter(tmp_path / "metrics.jsonl")

    def epoch(steps: int, start: int):
        return train_one_epoch(method.module, method, [batch] * steps, optimizer, epoch=0, epochs=1, step=start,
                               lr=0.01, device=torch.device("cpu"), amp=False, log_every=1,
                               progress=Progress(steps, enabled=False), metrics=metrics)

    assert not method.has_negatives()
    first = epoch(1, 0)
    assert first.loss is None and first.accuracy is None
    assert method.has_negatives()  # 4 keys written
    second = epoch(2, 1)  # both steps have 4 and 8 negatives: counted
    assert second.loss is not None and second.loss > 0 and second.accuracy is not None
    import json
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["loss"] is None and lines[0]["accuracy"] is None
    assert all(line["loss"] > 0 for line in lines[1:])
