"""The detection family: R-CNN detectors (VOC and COCO today), their datasets, models, metrics and the detectron2
engine. The shared fine-tuning loop is :mod:`transfer.engine`."""
