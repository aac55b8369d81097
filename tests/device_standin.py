"""A stand-in for CuPy on CPU workers (``GPU_MAGICS_DEVICE_ARRAYS=tests.device_standin``): "device" arrays are
a NumPy subclass, so a test can see which chunks were made "on the device" and that results came back as plain
NumPy, on a machine without a GPU. It has only the functions ``gpurun.graphs.device`` uses."""

from __future__ import annotations

from typing import Any

import numpy as np


class ndarray(np.ndarray):
    """An array "on the device"; NumPy operations on it keep it here, as CuPy's do."""


def asarray(value: Any) -> ndarray:
    return np.array(value, copy=True).view(ndarray)


def asnumpy(value: Any) -> np.ndarray:
    return np.array(value, copy=True).view(np.ndarray)


def broadcast_to(value: Any, shape: Any) -> ndarray:
    return np.broadcast_to(np.asarray(value), shape).view(ndarray)


class _State:
    def __init__(self, seed: Any) -> None:
        self._state = np.random.RandomState(seed)

    def __getattr__(self, name: str) -> Any:
        draw = getattr(self._state, name)
        return lambda *args, **kwargs: np.asarray(draw(*args, **kwargs)).view(ndarray)


class _Random:
    RandomState = _State


random = _Random()
