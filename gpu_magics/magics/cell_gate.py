"""Before a cell runs, as the cell's own first statement: fail with the line of a cluster start that failed in the
background since the last cell (once), so a Run All stops there; and with the line of a parked kernel whose GPU
memory could not come back (``kernel_park``: every cell, a ``%gpucluster`` one too, until a resume succeeds).

Done by an AST transformer that puts one call in front of the cell's statements, at the first statement's line
(tracebacks keep their line numbers), and only when there is something to say. The failure is then the cell's own.
IPython's ``pre_run_cell`` callbacks cannot do this: what they raise is printed as "Error in callback" and the cell
runs on. A ``%gpucluster`` cell is not stopped by an earlier start's failure: it answers it. A cell waits for the
imports ``%load_ext`` began only where it imports something new (``cluster.background.ahead``), not here.
"""

from __future__ import annotations

import ast
import contextlib
from typing import Any

from gpu_magics.cluster.control.kernel_cluster import unreported
from gpu_magics.cluster.workers import kernel_park
from gpu_magics.text.errors import ClusterError, StartFailed, said_in_one_line

_CALL = "__import__('gpu_magics.magics.cell_gate', fromlist=['before_cell']).before_cell()"
_KEY = "_gpu_magics_cell_gate"


@said_in_one_line
def before_cell() -> None:
    """The cell's first statement: raise the failure of a start that no cell has said yet."""
    failed = unreported()
    line = None if failed is None else failed.take_unreported()
    if line is not None:
        raise StartFailed(f"{line} (this cell did not run)")
    kept_parked = kernel_park.take_failure()
    if kept_parked is not None:
        raise ClusterError(kept_parked)


class CellGate(ast.NodeTransformer):
    """Puts ``before_cell()`` in front of a cell that has something to say."""

    def visit_Module(self, node: ast.Module) -> ast.Module:
        if not node.body or (unreported() is None and kernel_park.take_failure() is None):  # the cheap test first:
            return node  # almost every cell has nothing to say
        if _is_gate(node.body[0]) or (_is_cluster_magic(node.body[0]) and kernel_park.take_failure() is None):
            return node
        call = ast.parse(_CALL).body[0]
        first = node.body[0]
        for part in ast.walk(call):
            if isinstance(part, (ast.expr, ast.stmt)):
                part.lineno = part.end_lineno = first.lineno
                part.col_offset = part.end_col_offset = first.col_offset
        node.body.insert(0, call)
        return node


def _is_gate(statement: ast.stmt) -> bool:
    return ast.unparse(statement) == _CALL


def _is_cluster_magic(statement: ast.stmt) -> bool:
    """``%gpucluster ...`` as IPython turns it into Python: ``get_ipython().run_line_magic('gpucluster', ...)``."""
    if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
        return False
    call = statement.value
    return (
        isinstance(call.func, ast.Attribute)
        and call.func.attr == "run_line_magic"
        and bool(call.args)
        and isinstance(call.args[0], ast.Constant)
        and call.args[0].value == "gpucluster"
    )


def install(shell: Any) -> None:
    """Gate every cell of ``shell`` (once)."""
    if getattr(shell, _KEY, None) is None:
        gate = CellGate()
        shell.ast_transformers.append(gate)
        setattr(shell, _KEY, gate)


def uninstall(shell: Any) -> None:
    gate = getattr(shell, _KEY, None)
    if gate is not None:
        with contextlib.suppress(ValueError):  # the user may have taken it out
            shell.ast_transformers.remove(gate)
        delattr(shell, _KEY)
