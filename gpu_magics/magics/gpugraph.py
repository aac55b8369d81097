"""The ``%gpugraph`` line magic: a task-graph summary of any dask collection."""

from __future__ import annotations

import re

from IPython.core.magic import Magics, line_magic, magics_class

from gpu_magics.display.graph_view import GraphSummary, graph_summary, is_collection
from gpu_magics.text.errors import LineError, said_in_one_line


@magics_class
class GraphMagics(Magics):
    """Task-graph summaries of dask collections."""

    @line_magic
    @said_in_one_line
    def gpugraph(self, line: str) -> GraphSummary:
        """Summarize the task graph of a dask collection without computing it.

        Usage::

            %gpugraph EXPR

        EXPR is any Python expression evaluated in the notebook's namespace that gives a dask collection
        (array, dataframe, bag, delayed), e.g. ``%gpugraph (x + x.T).mean()``.

        Shows the operations as layers with their task counts and the bytes each produces (from chunks and
        dtype where known), the dependencies between layers as a compact layered DAG, and the number of tasks
        before and after optimization. Large graphs are aggregated per layer, and graphs of many layers are
        collapsed, so a 100,000-task graph stays readable. ``s = %gpugraph EXPR`` keeps the summary; in code,
        ``gpu_magics.display.graph_view.graph_summary(obj)`` returns the same object. It takes no options: a word
        such as ``--depth`` is refused as an unknown option.
        """
        expr = line.strip()
        if not expr:
            raise LineError("%gpugraph needs an expression, e.g. %gpugraph x.sum()")
        _refuse_options(expr)
        assert self.shell is not None
        try:
            obj = self.shell.ev(expr)
        except NameError as err:
            _refuse_options(expr, err.name)
            raise LineError(f"%gpugraph: {err}") from None
        except SyntaxError as err:
            raise LineError(f"%gpugraph: invalid expression {expr!r}: {err.msg}") from None
        if not is_collection(obj):
            kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
            raise LineError(f"%gpugraph: {expr!r} is a {kind}, not a dask collection")
        return graph_summary(obj)


_OPTION = re.compile(r"--[A-Za-z][\w-]*(=.*)?")


def _refuse_options(expr: str, undefined: str | None = None) -> None:
    """A word of ``expr`` written as an option (``--frob``; ``-v`` where ``v`` is the name not defined) is refused
    as one, not read as code (``x --frob`` would be "name 'frob' is not defined")."""
    for word in expr.split():
        if _OPTION.fullmatch(word) or (undefined and word in (f"-{undefined}", f"--{undefined}")):
            raise LineError(
                f"%gpugraph: unknown option {word}; %gpugraph takes no options, only an expression, e.g. "
                "%gpugraph x.sum()"
            )
