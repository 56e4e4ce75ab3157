"""YAML presets: the paper's runs and the embedded CPU default (found by path: moco_core.config.PRESETS)."""
