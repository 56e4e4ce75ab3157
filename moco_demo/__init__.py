"""``moco demo``: the whole protocol on the embedded data in one command (not named demo: a detectron2 source
root on sys.path has a demo/ folder that would shadow it)."""
