"""``moco eval retrieval``: instance retrieval on revisited Oxford and Paris (arXiv 1803.11285) with one global
feature an image, cosine ranking and revisitop's mAP on the Medium and Hard protocols."""
