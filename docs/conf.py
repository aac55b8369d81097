"""Sphinx configuration of the gpu-magics documentation site.

Built offline by ``bash scripts/docs.sh`` into ``docs/_build/html`` with warnings as errors and nitpicky references.
Pages are MyST Markdown; notebooks go through myst-nb: the CPU example notebooks run while the site builds (an error
fails the build), the stored GPU runs of ``examples/executed/`` are shown as they ran, never executed. The reference
pages are written from the code at each build (``_ext/reference_pages``), so they say what the code does.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path[:0] = [str(DOCS / "_ext"), str(ROOT)]

import gpu_magics  # noqa: E402

project = "gpu-magics"
author = "the gpu-magics developers"
copyright = "the gpu-magics developers"
release = gpu_magics.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx_copybutton",
    "sphinx_design",
    "notebook_pages",  # _ext/notebook_pages.py: stages the example notebooks under docs/notebooks/
    "reference_pages",  # _ext/reference_pages: the reference pages from the code, under docs/reference/generated/
    "readme_links",  # _ext/readme_links.py: the README's links into docs/ lead to pages of the built site
    "screenshots",  # _ext/screenshots.py: the pictures the browser tests took last, else the committed ones
]

exclude_patterns = ["_build", "jupyter_execute", "**.ipynb_checkpoints", "_ext", "grafana", "README.md"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
smartquotes = False  # "--workers" in the help texts stays two hyphens (no en dash), quotes stay as typed

# Every reference must resolve: a broken link, a missing page or an unknown object is a warning, and the build
# (sphinx-build -W -n --keep-going) fails on any warning.
nitpicky = True
nitpick_ignore_regex = [
    # Types of other projects in signatures (the build is offline: no intersphinx inventories to resolve them).
    ("py:class", r"(collections|distributed|dask|IPython|traitlets|numpy|cupy)\..*"),
    ("py:class", r"(Any|Client|InteractiveShell)"),
]

# MyST: Markdown pages; headings get anchors down to level 3 (links like page.md#section are checked).
myst_enable_extensions = ["colon_fence", "deflist", "fieldlist", "attrs_inline", "substitution"]
myst_heading_anchors = 3
myst_all_links_external = False
suppress_warnings = [
    "mystnb.unknown_mime_type",  # widget state the stored runs carry: shown by its text form
    "misc.highlighting_failure",  # an output Pygments cannot lex (a traceback with a "·") is shown unhighlighted
]

# Notebooks. The CPU notebooks run while the site builds; an error in a cell fails the build, and so does a cell
# that runs past nb_execution_timeout or a notebook past its time limit (_ext/notebook_pages.py). Results are cached by
# the notebook's content under _build/.jupyter_cache, so an unchanged notebook is not run again.
nb_execution_mode = "cache"
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
nb_execution_timeout = 150  # seconds, a cell
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_allow_errors = False
# The GPU runs (docs/notebooks/gpu/, from examples/executed/) are shown with their stored outputs.
nb_execution_excludepatterns = ["notebooks/gpu/*"]
nb_merge_streams = True

# HTML: the PyData theme, no fetches while building or reading (no external fonts, no analytics).
html_theme = "pydata_sphinx_theme"
html_title = "gpu-magics"
html_static_path = ["_static"]
html_css_files = ["css/site.css"]
html_last_updated_fmt = None
html_show_sourcelink = False
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 5,
    "navbar_align": "left",
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
    "secondary_sidebar_items": ["page-toc"],
    "icon_links": [
        {"name": "GitHub", "url": "https://github.com/gpu-magics/gpu-magics", "icon": "fa-brands fa-github"},
    ],
}

# Python API pages (autodoc): signatures as written, type hints in the description.
autodoc_typehints = "description"
autodoc_member_order = "bysource"
add_module_names = False

# Copy buttons leave out prompts and outputs.
copybutton_prompt_text = r">>> |\.\.\. |\$ |In \[\d*\]: "
copybutton_prompt_is_regexp = True

linkcheck_timeout = 15
linkcheck_retries = 2
