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
    from moco_core.model.methods import MocoMethod
    from moco_core.pretrain_config import ModelConfig
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


def test_each_log_line_gives_its_own_windows_data_wait(tmp_path, monkeypatch) -> None:
    """A window whose batches waited for the loader says so in its own line: the epoch's summary would dilute a
    slow window with the others (and a compiled run's first window with its compilation)."""
    import json

    from moco_core.model.methods import MocoMethod
    from moco_core.pretrain_config import ModelConfig
    from moco_core.run import engine
    from moco_core.run.progress import MetricsWriter, Progress

    clock = [0.0]  # a clock that moves only where the test says: 1 s a step, 3 s for each of the slow batches
    monkeypatch.setattr(engine.time, "perf_counter", lambda: clock[0])

    def step(*args, **kwargs):
        clock[0] += 1.0
        return torch.zeros(2, dtype=torch.float64), 4

    monkeypatch.setattr(engine, "train_step", step)
    method = MocoMethod(ModelConfig(arch="resnet18", queue_size=64, bn_groups=1), world_size=1, num_classes=0,
                        dataset_size=0)
    batch = ((torch.zeros(4, 3, 8, 8),) * 2, torch.zeros(4, dtype=torch.long), torch.arange(4))

    def loader():
        for i in range(6):
            if i >= 3:  # the second window's batches each wait 3 s
                clock[0] += 3.0
            yield batch

    metrics = MetricsWriter(tmp_path / "metrics.jsonl")
    stats = engine.train_one_epoch(method.module, method, loader(), torch.optim.SGD(method.module.parameters(), lr=0),
                                   epoch=0, epochs=1, step=0, lr=0.0, device=torch.device("cpu"), amp=False,
                                   log_every=3, progress=Progress(6, enabled=False), metrics=metrics)
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["data_wait"] for line in lines] == [0.0, 0.75]  # 0 of 3 s, then 9 of 12 s
    assert [line["images_per_s"] for line in lines] == [4.0, 1.0]  # 12 images in 3 s, then in 12 s
    assert stats.data_wait == 9 / 15
