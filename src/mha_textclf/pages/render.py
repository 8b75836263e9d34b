"""What both pages share: the template environment, images inlined as data URIs, and a page written atomically.

A page must open from the file system, offline, e-mailed or copied alone: so no CDN, no script, no file beside it.
Images travel inside the page as base64 PNG; the styles are in the base template.
"""

from __future__ import annotations

import base64
import functools
import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markupsafe import Markup

from mha_textclf.runs import files


@dataclass
class Image:
    title: str
    src: str  # a data: URI
    caption: str = ""


def png_file(path: Path, title: str, caption: str = "") -> Image | None:
    """The PNG at `path` as an inline image; None where there is none."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return Image(title, "data:image/png;base64," + base64.b64encode(data).decode("ascii"), caption)


def png_figure(figure: Any, title: str, caption: str = "", dpi: int = 100) -> Image:
    """A matplotlib figure drawn straight into the page (no file beside it)."""
    png = files.figure_png(figure, dpi=dpi)
    return Image(title, "data:image/png;base64," + base64.b64encode(png).decode("ascii"), caption)


def code_spans(text: str) -> Markup:
    """Markdown's `code` spans of a sentence the summary shares with summary.md, as <code>; the rest escaped."""
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text)))


@functools.cache
def environment():
    """Jinja with autoescaping: a text from the corpus or a class name is shown as written, never read as HTML. One
    per process: it keeps each template compiled (compiling one costs more than rendering it)."""
    import jinja2  # here: only the pages need it

    env = jinja2.Environment(loader=jinja2.PackageLoader("mha_textclf.pages", "templates"),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["code_spans"] = code_spans
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)


def write_page(path: Path, template: str, **context: Any) -> Path:
    files.write_text(path, render(template, **context))
    return path
