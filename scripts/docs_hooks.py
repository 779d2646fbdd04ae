"""MkDocs hooks of the docs site (mkdocs.yml): the reference parts are generated from the
code when the site is built. ``<!-- distfl:config-keys -->``, ``<!-- distfl:group-keys -->``
and ``<!-- distfl:algorithm-keys -->`` become the configuration tables of the schema,
``<!-- distfl:datasets -->`` and ``<!-- distfl:models -->`` the tables of the registered
datasets' and models' specs, and so on for every marker of
:data:`distfl.tools.reference.MARKERS`; ``<!-- distfl:run-file-layout -->`` becomes the
run file's layout listing (:func:`distfl.runfile.layout.describe`)."""

from __future__ import annotations

from distfl.runfile.layout import describe
from distfl.tools.reference import fill

LAYOUT = "<!-- distfl:run-file-layout -->"


def on_page_markdown(markdown, page, config, files):
    markdown = fill(markdown)
    if LAYOUT in markdown:
        markdown = markdown.replace(LAYOUT, "```\n" + describe() + "```")
    return markdown
