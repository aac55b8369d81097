"""The package metadata keeps its promises: a plain install has what the dashboard needs, the CUDA extras go
through dask-cuda's own extras with floors that resolve, the conda environment lists the same runtime needs, and
the project links and changelog exist."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def requirements(entries: list[str]) -> dict[str, Requirement]:
    found = [Requirement(entry) for entry in entries]
    return {requirement.name.lower(): requirement for requirement in found}


def lowest(requirement: Requirement) -> Version:
    floors = [Version(spec.version) for spec in requirement.specifier if spec.operator in (">=", "==", "~=")]
    assert floors, f"{requirement} has no floor"
    return min(floors)


def test_bokeh_is_a_dependency_that_distributed_accepts() -> None:
    from distributed.versions import BOKEH_REQUIREMENT

    bokeh = requirements(PROJECT["dependencies"])["bokeh"]
    assert BOKEH_REQUIREMENT.specifier.contains(lowest(bokeh))


def test_cuda_extras_use_dask_cudas_own_extras_with_floors_that_resolve() -> None:
    extras = PROJECT["optional-dependencies"]
    for extra, cuda, floor in (("cuda12", "cu12", "24.10"), ("cuda13", "cu13", "25.10")):
        dask_cuda = requirements(extras[extra])["dask-cuda"]
        assert dask_cuda.extras == {cuda}
        # dask-cuda 24.8 pins dask 2024.7.1 (through rapids-dask-dependency), below dask>=2024.8
        assert lowest(dask_cuda) >= Version(floor)
    assert lowest(requirements(PROJECT["dependencies"])["dask"]) == Version("2024.8")


def test_the_spmd_extra_installs_the_recipes_libraries_at_the_test_extras_floors() -> None:
    extras = PROJECT["optional-dependencies"]
    spmd, test = requirements(extras["spmd"]), requirements(extras["test"])
    assert set(spmd) == {"torch", "accelerate", "lightning", "deepspeed"}
    for name in set(spmd) & set(test):
        assert lowest(spmd[name]) == lowest(test[name]), name
    setup = (REPO / "scripts" / "setup-env.sh").read_text()
    pinned = Version(setup.split('"torch==', 1)[1].split('"', 1)[0])  # the torch the tests run with
    assert spmd["torch"].specifier.contains(pinned)


def test_conda_environment_lists_the_runtime_dependencies() -> None:
    environment = yaml.safe_load((REPO / "environment.yml").read_text())
    assert "rapidsai" in environment["channels"] and "conda-forge" in environment["channels"]
    listed = {str(entry).split(">")[0].split("<")[0].split("=")[0].strip() for entry in environment["dependencies"]}
    needed = set(requirements(PROJECT["dependencies"])) - {"dask", "distributed"}  # pinned through dask-cuda
    assert needed <= listed
    assert {"dask-cuda", "cupy"} <= listed


def test_project_urls_and_changelog() -> None:
    urls = PROJECT["urls"]
    assert set(urls) == {"Homepage", "Documentation", "Issues", "Changelog"}
    assert all(url.startswith("https://github.com/gpu-magics/gpu-magics") for url in urls.values())
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog") and "## [Unreleased]" in changelog
    assert urls["Changelog"].endswith("/CHANGELOG.md")
