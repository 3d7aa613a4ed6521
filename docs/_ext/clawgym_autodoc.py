"""autodoc adjustments for clawgym's code, so ``sphinx -n`` checks what matters:

* Names resolve as they do in the module that uses them. A docstring's :class:`ClawEnv` in
  ``envs.guess`` or a string annotation ``"Policy"`` (imported under ``TYPE_CHECKING``) means
  the object that name is bound to there; it links to that object's API entry, or is shown
  as plain code when the object has none (a private helper). A name bound to nothing in
  the module (a renamed class, a moved module) stays a nitpicky error.
* Dataclass signatures: ``field(default_factory=...)`` defaults show as ``dict()`` instead of
  ``<factory>``, and string annotations (``from __future__ import annotations`` with a name
  that only exists under ``TYPE_CHECKING``) lose their quotes, which Sphinx's signature parser
  would otherwise cut into nonsense targets.
* Google-style ``Args:``/``Returns:`` sections (a few functions use them) are rendered by
  napoleon's parser, but only in function, method, class and module docstrings: on attribute
  docstrings napoleon reads ``text: more text`` on the first line as ``type: description``.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import importlib
import importlib.util
import inspect
import re
import sys
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.ext.napoleon import Config as NapoleonConfig
from sphinx.ext.napoleon.docstring import GoogleDocstring

OWN = ("envs", "agents", "trainers", "benchmarks", "scripts")
_NAPOLEON = NapoleonConfig(napoleon_numpy_docstring=False, napoleon_use_rtype=False)


def _is_own(qualified: str) -> bool:
    return qualified.split(".", 1)[0] in OWN


@functools.cache
def _type_checking_imports(module_name: str) -> dict[str, str]:
    """``name -> module.name`` for the imports under ``if TYPE_CHECKING:`` of a module."""
    module = sys.modules.get(module_name)
    try:
        tree = ast.parse(inspect.getsource(module)) if module else None
    except (OSError, TypeError, SyntaxError):
        tree = None
    found: dict[str, str] = {}
    if tree is None:
        return found
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom) and stmt.module:
                    for alias in stmt.names:
                        found[alias.asname or alias.name] = f"{stmt.module}.{alias.name}"
                elif isinstance(stmt, ast.Import):
                    for alias in stmt.names:
                        found[alias.asname or alias.name] = alias.name
    return found


def _qualname(obj: Any) -> str | None:
    if isinstance(obj, ModuleType):
        return obj.__name__
    module, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(module, str) and isinstance(qual, str) and "<" not in qual:
        return f"{module}.{qual}"
    return None


def _import_dotted(dotted: str) -> Any:
    """The object ``a.b.C.d`` names, from the longest module prefix; KeyError if none."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            # Only clawgym's own modules are imported here; others only if already loaded
            # (a name like "this" or "antigravity" must not run a module).
            obj: Any = (importlib.import_module(module_name) if parts[0] in OWN
                        else sys.modules[module_name])
        except (ImportError, KeyError):
            continue
        except Exception:  # a module that fails to import is autodoc's error to report
            raise KeyError(dotted) from None
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                raise KeyError(dotted)
            obj = getattr(obj, attr)
        return obj
    raise KeyError(dotted)


def qualify(name: str, module_name: str | None, class_name: str | None = None) -> str | None:
    """What dotted ``name`` means in ``module_name`` (and class ``class_name`` there): the
    full dotted path of the object it is bound to, or None when it names nothing."""
    head, _, rest = name.partition(".")
    module = sys.modules.get(module_name or "")
    candidates: list[str] = []
    if module is not None:
        if class_name:
            owner = getattr(module, class_name.split(".")[0], None)
            for attr in class_name.split(".")[1:]:
                owner = getattr(owner, attr, None)
            if owner is not None and hasattr(owner, head):
                candidates.append(f"{module_name}.{class_name}.{name}")
        if head in vars(module):
            bound = _qualname(vars(module)[head])
            candidates.append(f"{bound}.{rest}" if bound and rest else bound or f"{module_name}.{name}")
        if head in _type_checking_imports(module.__name__):
            target = _type_checking_imports(module.__name__)[head]
            target = f"{target}.{rest}" if rest else target
            if not _is_own(target):
                return target  # another project's name, imported only for type checkers
            candidates.append(target)
        if head not in vars(module) and "__getattr__" in vars(module):
            candidates.append(f"{module_name}.{name}")  # made on access (a module __getattr__)
    if not candidates and head in vars(builtins):
        return f"builtins.{name}"
    candidates.append(name)
    for candidate in candidates:
        try:
            obj = _import_dotted(candidate)
        except KeyError:
            continue
        bound = _qualname(obj) if not isinstance(obj, typing.TypeVar) else None
        # Prefer where the object is defined (a re-export resolves to its home).
        if bound and bound.rsplit(".", 1)[-1] == candidate.rsplit(".", 1)[-1]:
            try:
                if _import_dotted(bound) is obj:
                    return bound
            except KeyError:
                pass
        return candidate
    return None


# ---- missing references ---------------------------------------------------------------------

def _listed_module(node: nodes.Element) -> str | None:
    """The module whose row of an autosummary table ``node`` sits in (its first link names
    it), or None when ``node`` is not in such a row."""
    row = node.parent
    while row is not None and not isinstance(row, nodes.row):
        row = row.parent
    if row is None:
        return None
    # The row's first link, resolved by now (a reference titled with the module's name) or not.
    first = next(iter(row.findall(lambda n: isinstance(n, (addnodes.pending_xref, nodes.reference)))), None)
    if first is None or first is node:
        return None
    target = first.get("reftarget") or first.get("reftitle") or ""
    return target if _is_own(target) and sys.modules.get(target) is not None else None


def resolve_by_name(app: Sphinx, env: BuildEnvironment, node: nodes.Element,
                    contnode: nodes.Element) -> nodes.Element | None:
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    if not re.fullmatch(r"[A-Za-z_][\w.]*", target):
        return None
    module_name, class_name = node.get("py:module"), node.get("py:class")
    listed = _listed_module(node)
    if listed:  # a module's summary line in its package's autosummary table: read it there
        module_name, class_name = listed, None
    qualified = qualify(target, module_name, class_name)
    if qualified is None:
        return None  # bound to nothing here: the nitpicky warning stays
    if not _is_own(qualified):
        return contnode  # an external object, like the namespaces nitpick_ignore_regex names
    domain = env.domains["py"]
    for reftype in (node.get("reftype"), "obj"):
        found = domain.resolve_xref(env, node.get("refdoc", ""), app.builder, reftype, qualified,
                                    node, contnode)
        if found is not None:
            return found
    return contnode  # a real clawgym object without an API entry (private, undocumented)


# ---- signatures -----------------------------------------------------------------------------

def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote and text[i - 1] != "\\" else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _annotation(text: str, module_name: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]

    def swap(match: re.Match[str]) -> str:
        name = match.group(0)
        if name in vars(builtins) or name in ("None",) or name in getattr(typing, "__all__", ()):
            return name
        qualified = qualify(name, module_name)
        return f"~{qualified}" if qualified else name

    return re.sub(r"(?<![\w.~])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", swap, text)


def _factory_text(factory: Any) -> str:
    name = getattr(factory, "__qualname__", "")
    return f"{name}()" if name and "<" not in name else "..."


def fix_signature(app: Sphinx, what: str, name: str, obj: Any, options: Any, signature: str | None,
                  return_annotation: str | None) -> tuple[str | None, str | None] | None:
    if not signature or not signature.startswith("("):
        return None
    module_name = getattr(obj, "__module__", None) or name.rsplit(".", 1)[0]
    factories: dict[str, str] = {}
    declared_in: dict[str, str] = {}  # a field's annotation is read where its class declares it
    if what == "class" and dataclasses.is_dataclass(obj):
        factories = {f.name: _factory_text(f.default_factory) for f in dataclasses.fields(obj)
                     if f.default_factory is not dataclasses.MISSING}
        for klass in reversed(obj.__mro__):
            for field_name in vars(klass).get("__annotations__", {}):
                declared_in[field_name] = klass.__module__
    params = []
    for param in _split_top(signature.strip()[1:-1], ","):
        param = param.strip()
        if not param:
            continue
        pieces = _split_top(param, "=")
        head = pieces[0].strip()
        default = "=".join(pieces[1:]).strip() if len(pieces) > 1 else None
        if ":" in head:
            pname, _, annotation = head.partition(":")
            where = declared_in.get(pname.strip(), module_name)
            head = f"{pname.strip()}: {_annotation(annotation, where)}"
        pname = head.split(":")[0].strip()
        if default == "<factory>" and pname in factories:
            default = factories[pname]
        if default is None:
            params.append(head)
        else:
            params.append(f"{head} = {default}" if ":" in head else f"{head}={default}")
    fixed_return = _annotation(return_annotation, module_name) if return_annotation else return_annotation
    return f"({', '.join(params)})", fixed_return


# ---- Google-style sections ----------------------------------------------------------------

def google_sections(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    if what in ("attribute", "data", "property") or not lines:
        return
    lines[:] = GoogleDocstring(gymnasium_sections(lines), _NAPOLEON, app, what, name, obj, options).lines()


_HEADING = re.compile(r"^(\s*)## (\S.*)$")


def gymnasium_sections(lines: list[str]) -> list[str]:
    """The env docstrings' Gymnasium sections (``## Description``, ``## Reward``, ...) as
    rubrics: a docstring is read in a terminal too, where a Markdown heading reads best, and
    reST has no headings inside a docstring."""
    out: list[str] = []
    for line in lines:
        match = _HEADING.match(line)
        out += [f"{match.group(1)}.. rubric:: {match.group(2)}", ""] if match else [line]
    return out


# ---- members ------------------------------------------------------------------------------

HOOKS = {"envs.core.ClawEnv": ("_open", "_act", "_release", "_shutdown")}
"""Private methods that are part of a class's contract (what a subclass implements)."""


def document_hooks(app: Sphinx, what: str, name: str, obj: Any, skip: bool, options: Any) -> bool | None:
    owner = getattr(obj, "__qualname__", "").rpartition(".")[0]
    module = getattr(obj, "__module__", "")
    if name in HOOKS.get(f"{module}.{owner}", ()) and getattr(obj, "__doc__", None):
        return False
    return None


# ---- generated pages ------------------------------------------------------------------------

GENERATED = "reference/generated"
"""Where autosummary writes the API reference's module pages (not in git)."""


def prune_stale_pages(app: Sphinx) -> None:
    """Delete generated pages of modules that no longer exist (moved, renamed), before
    autosummary writes the current ones: Sphinx would read a stale page and fail on it."""
    folder = Path(app.srcdir) / GENERATED
    for page in folder.glob("*.rst") if folder.is_dir() else ():
        try:
            gone = importlib.util.find_spec(page.stem) is None
        except (ImportError, ValueError):
            gone = True
        if gone:
            page.unlink()


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", prune_stale_pages, priority=400)  # autosummary's runs at 500
    app.connect("autodoc-skip-member", document_hooks)
    app.connect("autodoc-process-signature", fix_signature)
    app.connect("autodoc-process-docstring", google_sections)
    app.connect("missing-reference", resolve_by_name)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
