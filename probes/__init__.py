"""Training-free probes of frozen features (no head is trained; minutes a checkpoint): ``retrieval`` (``moco eval
retrieval``: instance retrieval on revisited Oxford and Paris, revisitop's mAP) and ``davis`` (``moco eval davis``:
DINO's video label propagation on DAVIS-2017, J and F as davis2017-evaluation scores them); ``cli`` holds both
commands. Imports moco_core only.
"""
