"""The datasets of the linear transfer suite (Kornblith et al., arXiv 1805.08974; SimCLR appendix B.8; DINOv2
Table 8), each with its metric, where it lies under ``--data ROOT``, how its splits come about, and its reader.

CUB-200-2011 stands in for Birdsnap, as DINOv2 did: Birdsnap was distributed as a list of image URLs, many of
which are gone, so no two groups hold the same Birdsnap; CUB-200-2011 (200 bird species, 5,994 train / 5,794 test
images) ships its files and its split.

Validation (where the lambda is chosen): the dataset's own val split where it ships one (Aircraft, DTD,
Flowers-102, VOC 2007), else a seeded, stratified 20% of train (ssl-transfer draws a plain random 20% with seed 0;
stratified keeps every class in both parts of small datasets). Splits not shipped are drawn: Caltech-101's 30
images a class for training (the rest test), and SUN397's split 1 shape (50 train / 50 test a class) where its
Partitions files are absent. :mod:`classification.linear_transfer.splits` writes every split used into the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from classification.linear_transfer import readers
from classification.linear_transfer.readers import Found


@dataclass(frozen=True)
class Spec:
    name: str  # the --datasets name and the report's column
    title: str
    metric: str  # classification.frozen.metrics: top1, mean_per_class, map11
    marker: str  # below ROOT: present when this is
    layout: str  # what is expected, for the one line naming a missing dataset
    read: Callable[[Path], Found]
    draw: tuple[int, int | None] | None = None  # (train, test) a class drawn from the pool; None: test is the rest


SPECS: tuple[Spec, ...] = (
    Spec("food101", "Food-101", "top1", "food-101/meta/train.json",
         "food-101/meta/{train,test}.json and food-101/images/<class>/<id>.jpg (torchvision's Food101)",
         readers.food101),
    Spec("cifar10", "CIFAR-10", "top1", "cifar-10-batches-py/batches.meta",
         "cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta} (torchvision's CIFAR10)", readers.cifar10),
    Spec("cifar100", "CIFAR-100", "top1", "cifar-100-python/meta",
         "cifar-100-python/{train,test,meta} (torchvision's CIFAR100)", readers.cifar100),
    Spec("cub200", "CUB-200-2011 (for Birdsnap)", "top1", "CUB_200_2011/images.txt",
         "CUB_200_2011/{images.txt,image_class_labels.txt,train_test_split.txt,classes.txt,images/} (the "
         "dataset's own archive)", readers.cub200),
    Spec("sun397", "SUN397", "top1", "SUN397/ClassName.txt",
         "SUN397/ClassName.txt and SUN397/<letter>/<class>/sun_*.jpg (torchvision's SUN397), optionally "
         "Training_01.txt and Testing_01.txt (the official Partitions)", readers.sun397, draw=(50, 50)),
    Spec("cars", "Stanford Cars", "top1", "stanford_cars/devkit/cars_meta.mat",
         "stanford_cars/{devkit/cars_meta.mat,devkit/cars_train_annos.mat,cars_test_annos_withlabels.mat,"
         "cars_train/,cars_test/} (torchvision's StanfordCars)", readers.stanford_cars),
    Spec("aircraft", "FGVC Aircraft", "mean_per_class", "fgvc-aircraft-2013b/data/variants.txt",
         "fgvc-aircraft-2013b/data/{variants.txt,images_variant_{train,val,test}.txt,images/} (torchvision's "
         "FGVCAircraft)", readers.fgvc_aircraft),
    Spec("dtd", "DTD", "top1", "dtd/dtd/labels/train1.txt",
         "dtd/dtd/labels/{train,val,test}1.txt and dtd/dtd/images/<class>/*.jpg (torchvision's DTD)", readers.dtd),
    Spec("pets", "Oxford-IIIT Pets", "mean_per_class", "oxford-iiit-pet/annotations/trainval.txt",
         "oxford-iiit-pet/annotations/{trainval,test}.txt and oxford-iiit-pet/images/*.jpg (torchvision's "
         "OxfordIIITPet)", readers.oxford_pets),
    Spec("caltech101", "Caltech-101", "mean_per_class", "caltech101/101_ObjectCategories",
         "caltech101/101_ObjectCategories/<category>/image_*.jpg (torchvision's Caltech101)", readers.caltech101,
         draw=(30, None)),
    Spec("flowers", "Flowers-102", "mean_per_class", "flowers-102/setid.mat",
         "flowers-102/{imagelabels.mat,setid.mat,jpg/image_*.jpg} (torchvision's Flowers102)", readers.flowers102),
    Spec("voc2007", "VOC 2007", "map11", "VOCdevkit/VOC2007/ImageSets/Main/train.txt",
         "VOCdevkit/VOC2007/{JPEGImages/,ImageSets/Main/{train,val,test}.txt,ImageSets/Main/<class>_<split>.txt} "
         "(torchvision's VOCDetection, year 2007, trainval and test)", readers.voc2007),
)
BY_NAME = {spec.name: spec for spec in SPECS}
# The report's column order: SimCLR's Table 8 and DINOv2's Table 8 (CUB in Birdsnap's place)
NAMES = tuple(spec.name for spec in SPECS)


def missing_line(spec: Spec, root: Path) -> str:
    """The one line naming a dataset that is not under ``root``, with the layout expected."""
    return f"{spec.name}: not found under {root} (expected {root}/{spec.layout}); skipped"
