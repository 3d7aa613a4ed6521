"""What the HTML writer would warn about, checked under the cheap ``dummy`` builder too.

tests/docs/test_docs_build.py builds with ``-b dummy``: it reads every page and resolves
every reference as ``make docs`` does (so ``-n`` catches the same broken references) but
renders nothing. The one warning only the HTML writer gives is a code block that its
language's lexer cannot read; this extension highlights each block there the same way.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.highlighting import PygmentsBridge


def highlight_blocks(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    if app.builder.name != "dummy":
        return
    bridge = PygmentsBridge("html", app.config.pygments_style)
    for node in doctree.findall(nodes.literal_block):
        if node.rawsource != node.astext():  # a parsed-literal: not highlighted
            continue
        lang = node.get("language", "default")
        args = dict(node.get("highlight_args", {}), force=node.get("force", False))
        bridge.highlight_block(node.rawsource, lang, opts=app.config.highlight_options.get(lang, {}),
                               location=node, **args)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("doctree-resolved", highlight_blocks)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
