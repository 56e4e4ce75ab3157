"""What the first steps of a short MoCo run do to the embedding, with the queue started random or empty.

Trains MoCo (the embedded preset's encoder and augmentation; momentum, lr and K from the flags) on images of
the embedded shapes dataset for a few hundred steps, once per ``model.queue_init``, and every ``--every`` steps
prints, on the step's own batch:

- ``pos``: mean cosine of a query with its positive key; ``batch``: with the other keys of the same batch;
  ``queue``: with the queue's keys. ``pos - batch`` is what the encoder knows about the instance; ``batch -
  queue`` is how far keys of this step stand apart from older ones (a cue that tells the positive from the
  negatives without looking at the image).
- ``|mean k|``: the norm of the mean of the batch's unit keys: 1 when every image gets the same key (collapse).

Measured on the 2-core CPU machine (2026-11-22; shapes version 3, the embedded preset's 50-100% crops and 4 BN
groups), resnet18 at 32 px, batch 128, K 1024, m 0.99, lr 0.06: with the random start, ``|mean k|`` goes from
0.73 to 0.99 within 40 steps, ``pos`` and ``batch`` stay equal and the loss stays near ln(1+K); with the empty
start ``|mean k|`` stays between 0.59 and 0.81 and ``pos - batch`` grows to 0.32 by step 149. The embedded
preset starts empty (see README, Evaluation).

    .venv/bin/python benchmarks/queue_start.py --steps 150 --every 10
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from moco_core.config import load_config  # noqa: E402
from moco_core.data.augment import build_pretrain_transform  # noqa: E402
from moco_core.data.data import load_rgb  # noqa: E402
from moco_core.data.shapes import ensure_shapes  # noqa: E402
from moco_core.model.methods import build_moco  # noqa: E402
from moco_core.pretrain_config import PretrainConfig  # noqa: E402


def run(queue_init: str, images: list[Image.Image], args: argparse.Namespace) -> None:
    cfg = load_config(PretrainConfig, "embedded")
    model_cfg = dataclasses.replace(cfg.model, momentum=args.momentum, queue_size=args.queue_size,
                                    queue_init=queue_init)
    torch.manual_seed(args.seed)
    moco = build_moco(model_cfg, world_size=1).train()
    transform = build_pretrain_transform(cfg.augment)
    optimizer = torch.optim.SGD(moco.encoder.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    print(f"queue_init={queue_init}: K {args.queue_size}, m {args.momentum}, lr {args.lr}, batch {args.batch}")
    print(" step   loss    pos  batch  queue  |mean k|")
    for step in range(args.steps):
        index = torch.randint(len(images), (args.batch,)).tolist()
        im_q = torch.stack([transform(images[i]) for i in index])
        im_k = torch.stack([transform(images[i]) for i in index])
        logits, labels, keys = moco(im_q, im_k)
        loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % args.every == 0 or step == args.steps - 1:
            with torch.no_grad():
                q = F.normalize(moco.encoder(im_q), dim=1)
                cos = q @ keys.T
                pos = cos.diagonal().mean().item()
                batch = (cos.sum() - cos.diagonal().sum()).item() / (args.batch * (args.batch - 1))
                written = moco.queue[:, moco.queue.any(dim=0)]
                queue = (q @ written).mean().item() if written.numel() else float("nan")
                mean_k = keys.mean(0).norm().item()
            print(f"{step:5d} {loss.item():6.3f} {pos:6.3f} {batch:6.3f} {queue:6.3f} {mean_k:9.3f}", flush=True)
        moco.enqueue(keys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--queue-size", type=int, default=1024)
    parser.add_argument("--momentum", type=float, default=0.99)
    parser.add_argument("--lr", type=float, default=0.06, help="the SGD lr itself (not per 256 images)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    images = [load_rgb(f) for f in sorted((ensure_shapes() / "train").glob("*/*.png"))]
    for queue_init in ("random", "empty"):
        run(queue_init, images, args)


if __name__ == "__main__":
    main()
