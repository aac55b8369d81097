"""A ``%config`` that gives one of the magics' settings a value it refuses fails its cell, in one line, so a Run All
stops there: IPython's ``%config`` catches what a setting raises, logs it ("ERROR:root: ...") and the cell goes on.

The settings check their values (traitlets validates them, and the classes' own validators raise ``TraitError``,
which rolls the value back). ``CheckedSettings.update_config``, what ``%config`` calls, turns a refusal into the
package's ``SettingError`` and keeps it for the cell instead of raising it into ``%config``'s log; an AST transformer
wraps each ``%config`` call of a cell in ``checked(begin() or ...)``, which raises it as soon as ``%config``
returns (the value ``%config Class.name`` gives is still the cell's result). A ``%config`` that no cell runs (code
that calls ``run_line_magic`` itself) raises it, and ``%config`` logs it, as before.
"""

from __future__ import annotations

import ast
import contextlib
from typing import Any

from traitlets import Bool, Float, Int, TraitError, TraitType
from traitlets.config import Configurable
from traitlets.config.loader import Config

from gpu_magics.text.errors import SettingError, said_in_one_line

_MODULE = "gpu_magics.magics.config_gate"
_KEY = "_gpu_magics_config_gate"
_refused: list[SettingError] = []  # what the %config running in a cell refused, raised once it returns
_checking: list[int | None] = [None]  # the cell whose %config runs now (begin() to checked()), by its number


class CheckedSettings(Configurable):
    """A configurable whose refused ``%config`` value fails the cell in one line (a base of the magics' classes)."""

    def update_config(self, config: Config) -> None:
        try:
            super().update_config(config)
        except TraitError as error:
            if not self._registered():  # another instance of the class (made outside the extension): it keeps its
                return  # value; the registered one, before or after it, refuses the value for the cell and forgets it
            refusal = SettingError(self._refusal_line(config, error))
            self._forget(config)
            if _checking[0] is None or _checking[0] != _cell_number():  # no cell's %config: raised into its log
                raise refusal from None
            _refused.append(refusal)

    def _registered(self) -> bool:
        """Whether this is the instance the shell's magics use (or no instance of the class is registered)."""
        manager = getattr(getattr(self, "shell", None), "magics_manager", None)
        registered = getattr(manager, "registry", {}).get(type(self).__name__)
        return registered is None or registered is self

    def _forget(self, config: Config) -> None:
        """The refused values leave the config ``%config`` passes on (to the configurables after this one) and the
        configs it was merged into already (the shell's: the next ``%load_ext`` makes the magics from it)."""
        mine = set(self._find_my_config(config)) & set(self.traits(config=True))
        shell = getattr(self, "shell", None)
        held = [config, *(c.config for c in getattr(shell, "configurables", ()) if c is not self)]
        for merged in held:
            for section in self.section_names():
                values = dict.get(merged, section)
                if isinstance(values, dict):
                    for name in mine:
                        values.pop(name, None)

    def _refusal_line(self, config: Config, error: TraitError) -> str:
        """``%config Class.name = value: what it takes; it stays current``, for the first value refused alone."""
        traits = self.traits(config=True)
        for name, value in self._find_my_config(config).items():
            trait = traits.get(name)
            if trait is None:
                continue
            try:
                trait._validate(self, value)
            except TraitError as refused:
                current = getattr(self, name)
                detail = _detail(trait, refused)
                return f"%config {type(self).__name__}.{name} = {value!r}: {detail}; it stays {current!r}"
        return f"%config {type(self).__name__}: {error}"


def _detail(trait: TraitType[Any, Any], error: TraitError) -> str:
    """What ``trait`` takes: its ``takes`` tag, its own validator's words, or what its type and bounds say."""
    takes = trait.metadata.get("takes")
    if takes:
        return f"takes {takes}"
    said = str(error)
    if " trait of a " not in said:  # the class's own validator: its words, not traitlets' own
        return said.removeprefix(f"{trait.name}: ")
    values = getattr(trait, "values", None)
    if values:
        return "takes one of " + ", ".join(repr(value) for value in values)
    if isinstance(trait, Bool):
        return "takes True or False"
    if isinstance(trait, (Int, Float)):
        kind = "a whole number" if isinstance(trait, Int) else "a number"
        low, high = trait.min, trait.max
        if low is not None and high is not None:
            return f"takes {kind} from {low:g} to {high:g}"
        if low is not None:
            return f"takes {kind} of at least {low:g}"
        if high is not None:
            return f"takes {kind} of at most {high:g}"
        return f"takes {kind}"
    return said


def _cell_number() -> int | None:
    """The number of the cell that runs now (a ``%config`` that failed leaves ``begin``'s mark on its cell only)."""
    from IPython import get_ipython

    shell = get_ipython()
    return None if shell is None else int(shell.execution_count)


def begin() -> None:
    """Before a cell's ``%config``: what it refuses is kept for ``checked``."""
    _refused.clear()
    _checking[0] = _cell_number()


@said_in_one_line
def checked(value: Any) -> Any:
    """After a cell's ``%config``: its result, or the refusal of a value, raised."""
    _checking[0] = None
    refused = list(_refused)
    _refused.clear()
    if refused:
        raise refused[0]
    return value


def _is_config_call(node: ast.Call) -> bool:
    """``%config ...`` as IPython turns it into Python: ``get_ipython().run_line_magic('config', ...)``."""
    return (
        isinstance(node.func, ast.Attribute)
        and node.func.attr == "run_line_magic"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "config"
    )


class ConfigGate(ast.NodeTransformer):
    """Wraps each ``%config`` call of a cell: ``checked(begin() or <the call>)``."""

    def visit_Module(self, node: ast.Module) -> ast.AST:
        """A cell without ``%config`` as it is (a walk over its nodes costs a fraction of transforming them)."""
        if not any(isinstance(part, ast.Call) and _is_config_call(part) for part in ast.walk(node)):
            return node
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if not _is_config_call(node):
            return node
        gate = f"__import__({_MODULE!r}, fromlist=['checked'])"
        wrapped = ast.parse(f"{gate}.checked({gate}.begin() or CALL)", mode="eval").body
        for part in ast.walk(wrapped):
            if isinstance(part, ast.expr):
                ast.copy_location(part, node)  # where the call was: its traceback's line
        assert isinstance(wrapped, ast.Call) and isinstance(wrapped.args[0], ast.BoolOp)
        wrapped.args[0].values[1] = node
        return wrapped


def install(shell: Any) -> None:
    """Check every ``%config`` of ``shell``'s cells (once)."""
    if getattr(shell, _KEY, None) is None:
        gate = ConfigGate()
        shell.ast_transformers.append(gate)
        setattr(shell, _KEY, gate)


def uninstall(shell: Any) -> None:
    gate = getattr(shell, _KEY, None)
    if gate is not None:
        with contextlib.suppress(ValueError):  # the user may have taken it out
            shell.ast_transformers.remove(gate)
        delattr(shell, _KEY)
