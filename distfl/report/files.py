"""Where ``distfl report`` writes, and which files there are its own.

The report's files are ``index.html``, its figures (``*.png``, with ``--pdf`` ``*.pdf``)
and, for a suite, each run's report under ``runs/<name>/``. An output directory is new,
empty, or an earlier report's: the files of the earlier report are removed before the new
one is written, and nothing else. A file is the report's own when its own bytes say so
(a page with the report's ``generator``, a PNG or PDF whose software is the report:
:data:`distfl.plot.SOFTWARE`) or an earlier report's page shows it (reports written
before the figures carried the mark). Anything else at a name the report writes (a PNG of
the user's, a symbolic link, a FIFO, a file under ``runs/``) is refused in one line before
anything is removed or written, and left as it is; so is a non-empty directory that holds
no report. Each file is then written beside and linked in where nothing is
(:func:`distfl.plot.write_page`): never through a link, never over a file.
"""

from __future__ import annotations

import os
import re
import stat
import struct
from html.parser import HTMLParser
from pathlib import Path

from distfl.errors import UserError

#: the page's mark (``<meta name=generator ...>``) and what a figure's software says
GENERATOR = "distfl report"
#: what a refusal says may be done instead
OTHER = "remove it, or give the report another --out"
#: the most bytes of a page read for its links
MAX_PAGE_BYTES = 16 << 20
#: a figure's name as the report writes it: no folder, a PNG or a PDF
FIGURE = re.compile(r"^[^/\\]+\.(png|pdf)$")
#: a run's page under a suite's report
RUN_PAGE = re.compile(r"^runs/([^/\\]+)/index\.html$")


class _Links(HTMLParser):
    """The ``href`` and ``src`` of a page, and whether it is the report's."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ours = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "meta" and a.get("name") == "generator" and a.get("content") == GENERATOR:
            self.ours = True
        for key in ("href", "src"):
            if isinstance(a.get(key), str):
                self.links.append(a[key])


def _read(path: Path, max_bytes: int, *, head: bool = False) -> bytes | None:
    from distfl.tools.suite_files import read_own

    return read_own(path, max_bytes, head=head)


def _page_links(path: Path) -> list[str] | None:
    """The links of the report's page at ``path``; None where it is not one."""
    data = _read(path, MAX_PAGE_BYTES)
    if data is None:
        return None
    parser = _Links()
    try:
        parser.feed(data.decode("utf-8", "replace"))
        parser.close()
    except (ValueError, AssertionError):
        return None
    return parser.links if parser.ours else None


def _marked(path: Path) -> bool:
    """Whether the figure at ``path`` says the report wrote it (a PNG's ``Software`` text
    before its image data, a PDF's ``Creator``)."""
    from distfl.plot import SOFTWARE

    if path.suffix == ".png":
        text = b"Software\x00" + SOFTWARE.encode()
        chunk = struct.pack(">I", len(text)) + b"tEXt" + text
        data = _read(path, 1 << 16, head=True) or b""
        return data.startswith(b"\x89PNG\r\n\x1a\n") and chunk in data.split(b"IDAT", 1)[0]
    data = _read(path, 64 << 20) or b""
    return data.startswith(b"%PDF") and f"/Creator ({SOFTWARE})".encode() in data


def _kind(path: Path) -> str:
    there = os.lstat(path)
    if stat.S_ISREG(there.st_mode):
        return f"a file of {there.st_size:,} bytes"
    if stat.S_ISLNK(there.st_mode):
        return "a symbolic link"
    return "a directory" if stat.S_ISDIR(there.st_mode) else "not a regular file"


def _shown(out: Path, suite: bool) -> set[str]:
    """The files (relative to ``out``) that the earlier report's pages in ``out`` show:
    its figures, and with ``suite`` each run's page and figures."""
    shown: set[str] = set()
    for link in _page_links(out / "index.html") or ():
        if FIGURE.match(link):
            shown.add(link)
        elif suite and (m := RUN_PAGE.match(link)) and m[1] not in (".", ".."):
            sub = f"runs/{m[1]}"
            links = _page_links(out / sub / "index.html")
            if links is not None:
                shown.add(f"{sub}/index.html")
                shown.update(f"{sub}/{x}" for x in links if FIGURE.match(x))
    return shown


def _entries(out: Path, suite: bool) -> list[str]:
    """Every entry of ``out`` at a name the report writes (``index.html``, ``*.png``,
    ``*.pdf``; with ``suite`` everything under ``runs/``), relative to ``out``, a folder
    after what it holds."""
    found = []
    for name in sorted(os.listdir(out)):
        if name == "index.html" or FIGURE.match(name):
            found.append(name)
        elif name == "runs" and suite:
            found += _under(out, "runs")
    return found


def _under(out: Path, rel: str) -> list[str]:
    path = out / rel
    if stat.S_ISDIR(os.lstat(path).st_mode):
        inside = [x for name in sorted(os.listdir(path)) for x in _under(out, f"{rel}/{name}")]
        return [*inside, rel]
    return [rel]


def _ours(path: Path, rel: str, shown: set[str]) -> bool:
    """Whether the regular file ``path`` (``rel`` in the output directory) is the report's:
    shown by the earlier report's pages, or marked as its own."""
    if rel in shown:
        return True
    if path.name == "index.html":
        return _page_links(path) is not None
    return FIGURE.match(path.name) is not None and _marked(path)


def prepare(out: Path | str, *, suite: bool = False) -> None:
    """Make ``out`` ready for a report (``suite``: a suite's, with ``runs/``): create it,
    or remove the files of the earlier report there (nothing else); refuse, before
    anything is removed, a path that is not a directory, a non-empty directory that holds
    no report, and anything at a name the report writes that the earlier report did not
    write."""
    from distfl.runfile.output import check_file

    out = Path(out)
    if (out.exists() or out.is_symlink()) and not out.is_dir():
        raise UserError(f"--out {out} is {_kind(out)}; expected a directory for the report")
    if out.is_dir() and any(out.iterdir()):
        check_file(out / "index.html", replace=True, label="the report's page", other=OTHER)
        if _page_links(out / "index.html") is None:
            raise UserError(
                f"--out {out} is a non-empty directory that holds no distfl report; "
                "give a new or empty directory"
            )
        shown = _shown(out, suite)
        entries = _entries(out, suite)
        for rel in entries:
            path = out / rel
            there = os.lstat(path)
            if stat.S_ISDIR(there.st_mode) and rel.count("/") <= 1:
                continue  # runs/ and runs/<name>/: removed once empty
            if not stat.S_ISREG(there.st_mode) or not _ours(path, rel, shown):
                raise UserError(
                    f"--out {out} holds {path} ({_kind(path)}), which no distfl report "
                    f"wrote; the report replaces and removes only its own files: {OTHER}"
                )
        for rel in entries:
            path = out / rel
            if stat.S_ISDIR(os.lstat(path).st_mode):
                os.rmdir(path)
            else:
                path.unlink()
    out.mkdir(parents=True, exist_ok=True)


__all__ = ["GENERATOR", "prepare"]
