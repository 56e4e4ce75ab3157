"""YAML presets: the paper's runs and the embedded CPU default (read with importlib.resources)."""
