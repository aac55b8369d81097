"""The screenshots the pages show: the ones the browser tests took last (``docs/_build/screenshots/``, which git
ignores) where they are there, else the committed ones (``docs/_static/screenshots/``). A page names the committed
path (``../_static/screenshots/panel-light.png``); the picture shown is chosen when the page is read, and a page is
read again when the choice changes (pictures taken, or removed, since the last build)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment

COMMITTED = "_static/screenshots/"  # under docs/
TAKEN = "_build/screenshots/"  # under docs/, written by the browser tests (tests/browser/chromium.mjs)
KEY = "gpu_magics_screenshots"  # the environment's record: docname -> {picture: path chosen}


def chosen(env: BuildEnvironment, name: str) -> str:
    """The source-relative path (``/``-rooted, as Sphinx reads it) of picture ``name`` to show."""
    taken = TAKEN + name
    return "/" + (taken if (env.srcdir / taken).is_file() else COMMITTED + name)


def _record(env: BuildEnvironment) -> dict[str, dict[str, str]]:
    if not hasattr(env, KEY):
        setattr(env, KEY, {})
    found: dict[str, dict[str, str]] = getattr(env, KEY)
    return found


def _on_doctree_read(app: Sphinx, doctree: nodes.document) -> None:
    env = app.env
    used: dict[str, str] = {}
    for image in doctree.findall(nodes.image):
        uri = str(image["uri"])
        path = (
            uri[1:] if uri.startswith("/") else posixpath.normpath(posixpath.join(posixpath.dirname(env.docname), uri))
        )
        if path.startswith(COMMITTED):
            name = path[len(COMMITTED) :]
            image["uri"] = used[name] = chosen(env, name)
    if used:
        _record(env)[env.docname] = used
    else:
        _record(env).pop(env.docname, None)


def _on_env_get_outdated(
    app: Sphinx, env: BuildEnvironment, added: set[str], changed: set[str], removed: set[str]
) -> Iterable[str]:
    return [
        docname
        for docname, used in _record(env).items()
        if docname not in removed and any(chosen(env, name) != path for name, path in used.items())
    ]


def _on_env_purge_doc(app: Sphinx, env: BuildEnvironment, docname: str) -> None:
    _record(env).pop(docname, None)


def _on_env_merge_info(app: Sphinx, env: BuildEnvironment, docnames: set[str], other: BuildEnvironment) -> None:
    _record(env).update({docname: used for docname, used in _record(other).items() if docname in docnames})


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("doctree-read", _on_doctree_read, priority=400)  # before Sphinx collects the images
    app.connect("env-get-outdated", _on_env_get_outdated)
    app.connect("env-purge-doc", _on_env_purge_doc)
    app.connect("env-merge-info", _on_env_merge_info)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
