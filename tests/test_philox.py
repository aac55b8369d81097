"""``gpu_magics.philox_random_state``: dask's ``RandomState`` with CuPy's Philox per chunk (CuPy stood in for by
NumPy here, where no GPU is; tests/gpu/test_philox_gpu.py draws on a real one)."""

from __future__ import annotations

import sys
import types

import dask.array as da
import numpy as np
import pytest

import gpu_magics
from gpu_magics.gpurun.timing import advice

PHILOX = 5  # CURAND_RNG_PSEUDO_PHILOX4_32_10's value


def stand_in_cupy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A ``cupy`` with ``random.RandomState`` (NumPy's underneath) that records the ``method`` it was given."""
    methods: list[int] = []

    class RandomState:
        __module__ = "cupy.random._generator"

        def __init__(self, seed: object = None, method: int = 100) -> None:
            methods.append(method)
            self._state = np.random.RandomState(seed)  # type: ignore[arg-type]

        def normal(self, *args: object, **kwargs: object) -> object:
            return self._state.normal(*args, **kwargs)  # type: ignore[arg-type]

    cupy = types.ModuleType("cupy")
    cupy.random = types.SimpleNamespace(RandomState=RandomState)  # type: ignore[attr-defined]
    curand = types.ModuleType("cupy.cuda.curand")
    curand.CURAND_RNG_PSEUDO_PHILOX4_32_10 = PHILOX  # type: ignore[attr-defined]
    cuda = types.ModuleType("cupy.cuda")
    cuda.curand = curand  # type: ignore[attr-defined]
    cupy.cuda = cuda  # type: ignore[attr-defined]
    for name, module in (("cupy", cupy), ("cupy.cuda", cuda), ("cupy.cuda.curand", curand)):
        monkeypatch.setitem(sys.modules, name, module)
    return methods


def test_it_is_dasks_random_state_drawing_with_philox(monkeypatch: pytest.MonkeyPatch) -> None:
    methods = stand_in_cupy(monkeypatch)
    rs = gpu_magics.philox_random_state(42)
    assert isinstance(rs, da.random.RandomState)
    x = rs.normal(10, 1, size=(40, 40), chunks=20)
    values = x.compute()
    assert values.shape == (40, 40) and abs(float(values.mean()) - 10) < 0.5
    assert methods and set(methods) == {PHILOX}  # every chunk's generator is Philox
    again = gpu_magics.philox_random_state(42).normal(10, 1, size=(40, 40), chunks=20).compute()
    assert np.array_equal(values, again)  # seeded: the same draws
    assert advice.xorwow_draws(x) == {}  # the advice does not count it as CuPy's default


def test_without_cupy_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(ImportError, match=r"^philox_random_state draws with CuPy, which is not installed \(pip"):
        gpu_magics.philox_random_state(1)


def test_the_advice_names_it_and_its_help_shows_how() -> None:
    assert advice.CALL == "gpu_magics.philox_random_state(seed)"
    doc = gpu_magics.philox_random_state.__doc__ or ""
    assert "rs = gpu_magics.philox_random_state(42)" in doc and "rs.normal(" in doc
