"""Sphinx directives that render reference pages from the code, so the pages cannot drift:

``{clawgym-keys} trainers.config.TrainConfig``
    Every key of a config dataclass, nested sections as dotted keys (``lora.rank``), each with
    its type, default and the field's docstring, read with :func:`trainers.config.field_docs`
    (what ``--help`` prints the first sentence of). A key without a docstring is a warning,
    so ``make docs`` (``-W``) fails until it has one.

``{clawgym-make-targets}``
    Every target of the Makefile with the ``## `` comment above it.

Field docstrings are reStructuredText (``code``, :class:`roles`), so they are parsed as
reST even on a MyST page.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import types
import typing
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Parser as RSTParser
from docutils.utils import new_document
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]


def _import(dotted: str) -> type:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _type_name(kind: Any) -> str:
    if isinstance(kind, type) and not isinstance(kind, types.GenericAlias):
        return kind.__name__
    return re.sub(r"\btyping\.", "", str(kind))


def _value(value: Any) -> str:
    """A default as it is written on the command line."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "none"
    if isinstance(value, str):
        return value if value else '""'
    return str(value)


def _declared_defaults(cls: type) -> dict[str, Any]:
    """Each field's declared default, without running ``__post_init__``."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


@dataclasses.dataclass
class Key:
    name: str
    kind: str
    default: str
    doc: str
    owner: str


def config_keys(cls: type, prefix: str = "") -> list[Key]:
    """Every key of ``cls`` in declaration order, sections flattened to ``section.key``."""
    from trainers.config import field_docs, shorthand

    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    defaults = _declared_defaults(cls)
    keys: list[Key] = []
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        default = defaults.get(f.name, dataclasses.MISSING)
        if dataclasses.is_dataclass(kind):
            short = shorthand(kind)
            sub = config_keys(kind, prefix=f"{prefix}{f.name}.")
            if short:  # engine=vllm is engine.kind=vllm: say so on that key
                for key in sub:
                    if key.name == f"{prefix}{f.name}.{short}":
                        key.name = f"{prefix}{f.name}, {key.name}"
            keys.extend(sub)
            continue
        if typing.get_origin(kind) is dict:
            name, shown = f"{prefix}{f.name}.<name>", "{}" if not default else _value(default)
        else:
            name, shown = prefix + f.name, _value(default) if default is not dataclasses.MISSING else "required"
        keys.append(Key(name, _type_name(kind), shown, docs.get(f.name, ""), f"{cls.__module__}.{cls.__qualname__}"))
    return keys


class _RSTMixin(SphinxDirective):
    def parse_rst(self, text: str) -> list[nodes.Node]:
        """Parse ``text`` as reST whatever the page's own markup is (MyST's nested parser
        would read it as Markdown)."""
        document = new_document(self.env.docname, self.state.document.settings)
        document.reporter = self.state.document.reporter
        RSTParser().parse(text, document)
        return list(document.children)


class ClawgymKeys(_RSTMixin):
    """``{clawgym-keys} module.ConfigClass``: a definition list of the class's keys."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        target = self.arguments[0]
        try:
            cls = _import(target)
        except (ImportError, AttributeError) as exc:
            raise self.error(f"clawgym-keys: cannot import {target}: {exc}") from None
        if not dataclasses.is_dataclass(cls):
            raise self.error(f"clawgym-keys: {target} is not a dataclass")
        for source in _sources(cls):
            self.env.note_dependency(source)  # an edited docstring rebuilds the page
        slug = re.sub(r"[^a-z0-9]+", "-", target.lower())
        listing = nodes.definition_list(classes=["clawgym-keys"])
        for key in config_keys(cls):
            if not key.doc.strip():
                logger.warning(f"clawgym-keys: {key.owner}'s key {key.name!r} has no docstring; "
                               "write one under the field", location=(self.env.docname, self.lineno))
            term = nodes.term()
            term += nodes.literal(text=key.name)
            term += nodes.Text(f" : {key.kind} = ")
            term += nodes.literal(text=key.default)
            item = nodes.definition_list_item(ids=[f"{slug}-{re.sub(r'[^a-z0-9]+', '-', key.name.lower())}"])
            item += term
            definition = nodes.definition()
            definition.extend(self.parse_rst(_dedent_doc(key.doc)))
            item += definition
            listing += item
        return [listing]


def _sources(cls: type) -> set[str]:
    """The source files declaring ``cls``, its bases and its sections' classes."""
    found: set[str] = set()
    for klass in cls.__mro__:
        if dataclasses.is_dataclass(klass):
            found.add(inspect.getsourcefile(klass) or "")
            for kind in typing.get_type_hints(klass).values():
                if dataclasses.is_dataclass(kind):
                    found |= _sources(kind)
    return found - {""}


def _dedent_doc(doc: str) -> str:
    """A field docstring's lines after the first are indented like the source: dedent them."""
    lines = doc.strip().splitlines()
    if len(lines) <= 1:
        return doc.strip()
    rest = lines[1:]
    indent = min((len(line) - len(line.lstrip()) for line in rest if line.strip()), default=0)
    return "\n".join([lines[0].strip(), *(line[indent:] for line in rest)])


def make_targets(makefile: Path) -> list[tuple[str, str]]:
    """``(target, comment)`` for every rule of ``makefile``; comment: its ``## `` lines."""
    rows: list[tuple[str, str]] = []
    comment: list[str] = []
    for line in makefile.read_text().splitlines():
        if line.startswith("## "):
            comment.append(line[3:].strip())
            continue
        match = re.match(r"^([A-Za-z][\w-]*)\s*:(?!=)", line)
        if match:
            rows.append((match.group(1), " ".join(comment)))
        if not line.startswith("\t"):
            comment = []
    return rows


class ClawgymMakeTargets(_RSTMixin):
    """``{clawgym-make-targets}``: the Makefile's targets and their ``## `` comments."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        makefile = ROOT / "Makefile"
        self.env.note_dependency(str(makefile))
        listing = nodes.definition_list(classes=["clawgym-make-targets"])
        for target, comment in make_targets(makefile):
            if not comment:
                logger.warning(f"clawgym-make-targets: Makefile target {target!r} has no '## ' comment "
                               "above it", location=(self.env.docname, self.lineno))
            item = nodes.definition_list_item(ids=[f"make-{target}"])
            term = nodes.term()
            term += nodes.literal(text=f"make {target}")
            item += term
            definition = nodes.definition()
            definition.extend(self.parse_rst(comment))
            item += definition
            listing += item
        return [listing]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("clawgym-keys", ClawgymKeys)
    app.add_directive("clawgym-make-targets", ClawgymMakeTargets)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
