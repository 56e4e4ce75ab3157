"""The detection family (``moco eval voc|coco|keypoints|lvis|cityscapes|densepose``): the config (``config``), the
run (``run``: weights -> dataset -> detector -> fine-tuning -> test -> record), datasets in VOC, COCO, LVIS and
Cityscapes layouts and their embedded stand-ins, the torchvision models (Faster/Mask/Keypoint R-CNN, C4 and FPN),
the metrics, and the detectron2 engine (DensePose included). The fine-tuning loop is :mod:`transfer.engine`."""
