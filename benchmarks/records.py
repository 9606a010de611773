"""Reads a `ratchet compare --json` document under today's field names.

Records made before 2026-12-05 name the interval `ratio_ci95` (it held the
interval at `ci_level`, not always 95%) and the sample count `blocks`; the
scripts read old and new records alike through this one function.
"""
import json

RENAMED = {"ratio_ci95": "ratio_interval", "blocks": "sample_count"}


def _renamed(value):
    if isinstance(value, dict):
        return {RENAMED.get(k, k): _renamed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v) for v in value]
    return value


def load(path):
    with open(path) as f:
        return _renamed(json.load(f))
