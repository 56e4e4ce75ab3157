"""Detection and segmentation transfer (VOC, COCO). detectron2 is imported lazily, only in this package."""
