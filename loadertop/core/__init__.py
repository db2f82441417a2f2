"""The engine: plain Python, no textual/rich/plotext. Also the Python API."""
