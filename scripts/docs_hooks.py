"""MkDocs hooks of the docs site (mkdocs.yml): the reference parts are generated from the
code when the site is built. Each marker of :data:`distfl.tools.reference.MARKERS`
(``<!-- distfl:config-keys -->`` and the others), with the part the page keeps up to its
end marker, becomes what the code generates now: the configuration tables of the schema,
the tables of the registered datasets' and models' specs, what each algorithm records, the
run file's layout listing (:func:`distfl.tools.reference.fill`). The pages in the
repository keep the same parts, written by ``python -m distfl.tools.reference --write-docs``."""

from __future__ import annotations

from distfl.tools.reference import fill

#: the marker of the run file's layout listing (docs/run-file.md)
LAYOUT = "<!-- distfl:run-file-layout -->"


def on_page_markdown(markdown, page, config, files):
    return fill(markdown)
