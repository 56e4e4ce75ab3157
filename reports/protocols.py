"""What ran: the length of an evaluation as its record states it, and the titles and notes that name it so.

A table says "the paper's protocol" or "the embedded schedule" only where the records' config trained for that
preset's length: a linear run shortened to 5 epochs is "5 of the paper's 100 epochs", a VOC run of 60 iterations
is not the embedded schedule of 200. The lengths below are those of the presets (classification/linear.py's defaults,
configs/voc_*.yaml, coco_*.yaml and semseg_*.yaml); tests/reports/test_protocols.py checks them against the
presets themselves, since ``reports`` imports no other package of ours.
"""

from __future__ import annotations

from typing import Any, Protocol


class Setting(Protocol):
    """What is read here of a :class:`reports.summary.Setting` (named by its fields: summary imports this module)."""

    task: str
    protocol: str
    dataset_path: str
    schedule: str | None
    length: int | None
    data_digest: str | None
    mark: str | None


PAPER_LINEAR_EPOCHS = 100  # arXiv 1911.05722 section 4.1, the official main_lincls.py
# The official facebookresearch/moco-v3 main_lincls.py's --epochs default (arXiv 2104.02057), and so of the
# lincls_mocov3 presets (tests/reports/test_protocols.py checks it).
V3_LINEAR_EPOCHS = 90
V3_PROTOCOL = "linear-mocov3"
LINEAR_EPOCHS = {"linear": PAPER_LINEAR_EPOCHS, V3_PROTOCOL: V3_LINEAR_EPOCHS}  # protocol -> its preset's epochs
# The presets that run the MoCo v3 protocol (classification/): (ImageNet, embedded data), by backbone family
V3_PRESETS = {"resnet": ("lincls_mocov3", "lincls_mocov3_embedded"),
              "vit": ("lincls_mocov3_vit", "lincls_mocov3_vit_embedded")}
# The linear head grid (classification/frozen/grid.py): chosen on held-out train images, or on val (the reported
# set, optimistic); its preset's length is DINOv2's 10 epochs (lincls_grid; tests/reports/test_grid.py checks it).
GRID_PROTOCOL, GRID_ON_VAL = "linear-grid", "linear-grid-selected-on-val"
GRID_EPOCHS = 10
EPOCH_TASKS = ("linear", "finetune")  # lengths counted in epochs (optim.epochs)
# Fine-tuning's presets by evaluation data (configs/finetune_*.yaml; tests/reports/test_protocols.py checks them):
# data kind -> (preset, its optim.epochs, what the title calls it)
FINETUNE_PRESETS = {"imagenet": ("finetune_imagenet", 90, "the paper's ImageNet recipe"),
                    "inat2018": ("finetune_inat", 100, "the paper's iNaturalist recipe"),
                    "embedded": ("finetune_embedded", 5, "the embedded preset")}
# fine-tuned detectors: an engine, a model and a schedule each
DETECTION_TASKS = ("voc", "coco", "keypoints", "lvis", "cityscapes", "densepose")
# (task, schedule label) -> the preset's solver.iterations
SCHEDULE_ITERATIONS = {("voc", "24k"): 24000, ("voc", "embedded"): 200, ("coco", "1x"): 90000,
                       ("coco", "2x"): 180000, ("coco", "embedded"): 200, ("keypoints", "2x"): 180000,
                       ("keypoints", "embedded"): 200, ("lvis", "2x"): 180000, ("lvis", "embedded"): 200,
                       ("cityscapes", "24k"): 24000, ("cityscapes", "embedded"): 200, ("densepose", "s1x"): 130000,
                       ("densepose", "embedded"): 200,
                       ("semseg", "30k"): 30000, ("semseg", "90k"): 90000, ("semseg", "embedded"): 300}
DETECTION_HEADS = {"voc": "VOC detection", "coco": "COCO detection and instance segmentation",
                   "keypoints": "COCO keypoint detection",
                   "lvis": "LVIS v0.5 instance segmentation", "cityscapes": "Cityscapes instance segmentation",
                   "densepose": "COCO dense pose"}


def preset_schedule(s: Setting) -> str:
    """The preset a schedule label names: a run at another length is labelled "embedded, 60 it" (its config
    says so when --set changed solver.iterations alone), the preset "embedded"."""
    return (s.schedule or "").split(", ")[0]


def finetune_data(s: Setting) -> str | None:
    """The kind of a fine-tuning's evaluation data, for its preset: "embedded", "inat2018" (a name or path that
    says iNat), "imagenet" (ImageNet or ILSVRC); None otherwise."""
    if s.dataset_path == "embedded":
        return "embedded"
    text = f"{s.dataset} {s.dataset_path}".lower()
    if "inat" in text:
        return "inat2018"
    return "imagenet" if "imagenet" in text or "ilsvrc" in text else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def eval_length(task: str, config: dict[str, Any]) -> int | None:
    """The epochs (linear: ``optim.epochs``) or iterations (detection: ``iterations``, else ``solver.iterations``)
    a record's evaluation trained; None for kNN, which trains nothing, and where the config does not say."""
    if task in EPOCH_TASKS:
        optim = config.get("optim")
        return _count(optim.get("epochs")) if isinstance(optim, dict) else None
    if task in (*DETECTION_TASKS, "semseg"):
        solver = config.get("solver")
        found = _count(config.get("iterations"))
        return found if found is not None or not isinstance(solver, dict) else _count(solver.get("iterations"))
    return None


def length_key(s: Setting) -> str | None:
    """The length in a setting's key: "100ep", "200it"."""
    if s.length is None:
        return None
    return f"{s.length}ep" if s.task in EPOCH_TASKS else f"{s.length}it"


def paper_length(s: Setting) -> int | None:
    """The length of the preset a setting's protocol and schedule name; None where none is known."""
    if s.task == "linear":
        return GRID_EPOCHS if s.protocol in (GRID_PROTOCOL, GRID_ON_VAL) else LINEAR_EPOCHS.get(s.protocol,
                                                                                                PAPER_LINEAR_EPOCHS)
    if s.task == "finetune":
        kind = finetune_data(s)
        return FINETUNE_PRESETS[kind][1] if kind else None
    return SCHEDULE_ITERATIONS.get((s.task, preset_schedule(s)))


def runs_preset_length(s: Setting) -> bool:
    """The records trained for their preset's length (or do not say, as records before the field did)."""
    return s.length is None or s.length == paper_length(s)


def _linear_length(s: Setting, whose: str = "the paper's", epochs: int = PAPER_LINEAR_EPOCHS) -> str:
    """"5 of the paper's 100 epochs", "120 epochs; the MoCo v3 protocol's: 90"."""
    if s.length is None:
        return "epochs not recorded"
    if s.length < epochs:
        return f"{s.length} of {whose} {epochs} epochs"
    return f"{s.length} epochs; {whose}: {epochs}"


def _v3_linear(s: Setting) -> str:
    """"the MoCo v3 protocol, 90 epochs", "30 of the MoCo v3 protocol's 90 epochs"."""
    if s.length == V3_LINEAR_EPOCHS:
        return f"the MoCo v3 protocol, {V3_LINEAR_EPOCHS} epochs"
    if s.length is None:
        return "the MoCo v3 protocol, epochs not recorded"
    return _linear_length(s, "the MoCo v3 protocol's", V3_LINEAR_EPOCHS)


def _schedule(s: Setting) -> str:
    """"24k schedule, 24000 iterations"; "60 iterations, not the embedded schedule's 200"."""
    preset = SCHEDULE_ITERATIONS.get((s.task, preset_schedule(s)))
    named = preset_schedule(s)
    if s.length is None:
        return f"{s.schedule} schedule label, iterations not recorded" if s.schedule else "iterations not recorded"
    if preset is None:
        return f"schedule {s.schedule}, {s.length} iterations" if s.schedule else f"{s.length} iterations"
    if s.length == preset:
        return f"{named} schedule, {s.length} iterations"
    return f"{s.length} iterations, not the {named} schedule's {preset}"


def setting_title(s: Setting) -> str:
    if s.task == "linear":
        if s.protocol == "linear":
            what = "the paper's protocol, 100 epochs" if s.length == PAPER_LINEAR_EPOCHS else _linear_length(s)
            head = f"Linear classification ({what})"
        elif s.protocol == V3_PROTOCOL:
            head = f"Linear classification ({_v3_linear(s)})"
        elif s.protocol == "linear-cached":
            length = "" if s.length is None else f"; {s.length} epochs"
            head = f"Linear classification on cached features (NOT the paper's protocol{length})"
        elif s.protocol in (GRID_PROTOCOL, GRID_ON_VAL):
            length = "epochs not recorded" if s.length is None else f"{s.length} epochs"
            where = ("chosen on train images held out" if s.protocol == GRID_PROTOCOL else
                     "SELECTED ON VAL, the reported set: optimistic")
            head = f"Linear head grid (NOT the paper's protocol; {length}, one head {where})"
        else:
            head = f"Linear classification (protocol {s.protocol}, {_linear_length(s)})"
    elif s.task == "finetune":
        head = f"Fine-tuning ({_finetune_length(s)})"
    elif s.task == "knn":
        head = "kNN classification (weighted kNN)" if s.protocol == "knn" else f"kNN classification ({s.protocol})"
        if s.k is not None and s.k != 200:  # moco eval knn's default (InstDisc's) goes unsaid
            head = head.replace(")", f", k {s.k})", 1)
    elif s.task == "fewshot":
        where = "held-out train images" if s.protocol == "fewshot" else "VAL, the reported set: optimistic"
        head = (f"Few-shot classification (k labelled images a class; linear: L2 logistic regression, its strength "
                f"chosen on {where}; weighted kNN)")
    elif s.task == "retrieval":
        what = QUERY_TITLES.get(s.model or "", s.model or "query variant not recorded")
        head = f"Instance retrieval by one global feature an image (revisitop's mAP; {what})"
    elif s.task == "davis":
        head = f"Video object segmentation by label propagation (DINO's protocol; {s.model or 'features not recorded'})"
    else:
        what = ", ".join(p for p in (s.model, _schedule(s), s.engine) if p)
        head = f"{DETECTION_HEADS.get(s.task, 'Semantic segmentation')} ({what})"
    return f"{head}: {s.dataset}" + (f", {MARK_TITLES[s.mark]}" if s.mark else "")


# A retrieval table's query variant (reports.records.table_views names it as the setting's model)
QUERY_TITLES = {"cropped queries": "queries cropped to their bbx, revisitop's protocol",
                "full queries": "whole query images, as DINOv2 ran them"}
MARK_TITLES = {"smoke": "smoke runs (MOCO_SMOKE=1: shortened; numbers mean nothing)",
               "unfinished": "unfinished pretrainings (stopped before their planned epochs)"}
SMOKE_NOTE = ("Smoke runs (MOCO_SMOKE=1, or evaluations of weights a smoke run made) check a set-up in seconds: "
              "every run shortened, sizes shrunk, small sets of their own. Their numbers mean nothing; they are "
              "kept out of the tables of real runs (moco report --mix-marked puts them there, marked).")
UNFINISHED_NOTE = ("Evaluations of pretrainings stopped before the epochs their config planned (killed or stopped "
                   "part-way): apart from the table of finished runs, where this setting's random-init row is "
                   "(moco report --mix-marked puts them there, marked unfinished).")


def _finetune_length(s: Setting) -> str:
    """"the paper's iNaturalist recipe, 100 epochs", "5 of the embedded preset's 10 epochs", "30 epochs"."""
    kind = finetune_data(s)
    if kind is None:
        return "epochs not recorded" if s.length is None else f"{s.length} epochs"
    _, epochs, name = FINETUNE_PRESETS[kind]
    if s.length == epochs:
        return f"{name}, {epochs} epochs"
    whose = f"{name.removeprefix('the ')}'s"
    return _linear_length(s, f"the {whose}", epochs)


def setting_subtitle(s: Setting) -> str:
    content = f" (content digest {s.data_digest[:12]}: runs on copies of it elsewhere are grouped here)" \
        if s.data_digest else ""
    text = f"Evaluation data: {s.dataset_path}{content}. Protocol: {s.protocol}."
    if s.protocol == "linear-cached":
        text += " fc trained on center-crop features extracted once; not comparable to the paper's numbers."
    if s.task == "fewshot":
        text += (" For each k, several draws of k train images a class (seeds in the records), read by a linear "
                 "classifier and by kNN on the frozen backbone's center-crop features; each cell the mean over "
                 "the pretraining's trials of the mean over the draws.")
    if s.task == "retrieval":
        text += (" Images ranked by the cosine of their L2-normalised global features (the record's config names the "
                 "feature and scales); mAP as revisitop's compute_map defines it (arXiv 1803.11285: Medium, easy and "
                 "hard images positive; Hard, hard positive, easy ignored; junk ignored in both). Easy mAP, where it "
                 "ran, and mP@k are in the CSV.")
    if s.protocol in (GRID_PROTOCOL, GRID_ON_VAL):
        text += (" Many linear heads (learning rates x features) trained together on one frozen pass a batch "
                 "(DINOv2's linear evaluation, arXiv 2304.07193); the row is the one head chosen, named in the note. ")
        text += ("It was chosen on a split held out from train (the record names its seed and size), never on the "
                 "set reported." if s.protocol == GRID_PROTOCOL else "It was chosen on val, the very set reported "
                 "(DINOv2's default): its number is optimistic by the spread of the grid, and is not comparable to "
                 "a held-out choice.")
        text += " IN-V2, IN-A, IN-R, IN-Sketch and IN-ReaL: the chosen ImageNet head on ImageNet's robustness sets."
    if s.task == "finetune":
        text += (" The whole backbone and a new fc trained end to end, BN trained (arXiv 1911.05722 appendix A.6 "
                 "and A.7); the record's note gives the optimiser and schedule.")
    if s.protocol == V3_PROTOCOL:
        text += (" The protocol of the official moco-v3 main_lincls.py (its presets: SGD with momentum 0.9, no weight "
                 "decay, a cosine lr per epoch, batch 1024, lr per 256 images 0.1 for a ResNet and 3 for a ViT); "
                 "not the v1/v2 paper's (lr 30, step schedule, 100 epochs), whose tables are apart.")
    return text


def chance_note(s: Setting) -> str | None:
    """Top-1 and top-5 of guessing, for classification over a known number of classes."""
    if s.task not in ("linear", "finetune", "knn", "fewshot") or not s.classes:
        return None
    top1, top5 = 100 / s.classes, 100 * min(5, s.classes) / s.classes
    return f"Chance level: top-1 {top1:.3g}%, top-5 {top5:.3g}% ({s.classes} classes)."


def v3_preset(arch: str, dataset_path: str) -> str:
    """The preset of the MoCo v3 protocol for a backbone and data: ViTs train at lr 3, ResNets at 0.1."""
    imagenet, embedded = V3_PRESETS["vit" if arch.startswith("vit_") else "resnet"]
    return embedded if dataset_path == "embedded" else imagenet
