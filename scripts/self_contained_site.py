"""Sphinx extension: the site works from its own files and sends no reader's request to a third party.

Two things in Jupyter Book 1's stack would reach out, and this extension changes both:

1. MathJax, which Sphinx loads from cdn.jsdelivr.net by default, is served by the site itself (below).
2. Live code (Thebe) is off in _config.yml, yet sphinx-thebe still adds its scripts to every page: a loader that
   would fetch Thebe from unpkg.com, and its configuration, added twice, so that every page logged
   "Identifier 'THEBE_JS_URL' has already been declared". ``drop_thebe_assets`` leaves them out.

It also keeps pages light: the theme loads ``fontawesome.js`` (1.5 MB, Font Awesome's SVG icons, there "so that users
can add custom icons") on every page, although its stylesheet already draws the same icons with Font Awesome's web
fonts. ``drop_fontawesome_js`` removes that script from the built pages.

MathJax
-------

MathJax 3.2.2 comes from the PyPI package ``django-static-mathjax`` (pinned in requirements.txt; it has no
dependencies and ships MathJax as plain files). At every HTML build this extension copies the part of its ``es5``
folder that the pages use into ``_build/mathjax-static/mathjax/`` and adds that folder to ``html_static_path``, so
Sphinx publishes it as ``_static/mathjax/``. ``_config.yml`` points ``mathjax_path`` at ``mathjax/tex-chtml.js``.

What is copied (about 2 MB of the package's 24 MB):
- ``tex-chtml.js``: TeX input, HTML output, the TeX font metrics, the menu and assistive MathML, in one file;
- ``output/chtml/fonts/woff-v2/*.woff``: the fonts that file loads, each only when a page needs it;
- ``input/tex/extensions/*.js``: TeX packages that MathJax's autoload fetches only when a page uses one of their
  macros (``\\boldsymbol``, ``\\color``, ``\\cancel``, ...); a page that uses none loads none of them.

The copy is made from the installed package rather than committed, so the pin in requirements.txt is the only
place that says which MathJax the site uses. The folder is deliberately not the book's own ``_static/``:
Jupyter Book 1 adds every ``.js`` file it finds there to every page.
"""
import importlib.metadata
import pathlib
import re
import shutil

from sphinx.errors import ExtensionError

PACKAGE = "django-static-mathjax"
URL_FOLDER = "mathjax"  # the site serves the copy at _static/mathjax/
ENTRY = "tex-chtml.js"
PATTERNS = [ENTRY, "output/chtml/fonts/woff-v2/*.woff", "input/tex/extensions/*.js"]


def es5_folder() -> pathlib.Path:
    """The package's folder of MathJax's browser build."""
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ExtensionError(f"{PACKAGE} is not installed; the site serves MathJax from it. "
                             f"Run `pip install -r requirements.txt` (or `make book`, which does).") from None
    folder = pathlib.Path(dist.locate_file("mathjax/static/mathjax/es5"))
    if not (folder / ENTRY).is_file():
        raise ExtensionError(f"{PACKAGE} {dist.version} has no {ENTRY} in {folder}")
    return folder


def copy_mathjax(source: pathlib.Path, target: pathlib.Path) -> list[pathlib.Path]:
    """Copy the files the pages may load from ``source`` (an es5 folder) into ``target``; return the copies."""
    if target.exists():
        shutil.rmtree(target)
    copied = []
    for pattern in PATTERNS:
        matches = sorted(source.glob(pattern))
        if not matches:
            raise ExtensionError(f"no file matches {pattern!r} in {source}")
        for path in matches:
            destination = target / path.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, destination)
            copied.append(destination)
    licence = source.parent / "LICENSE"
    if licence.is_file():
        shutil.copy2(licence, target / "LICENSE")
    return copied


def stage_mathjax(app, config) -> None:
    """On config-inited (before the environment stores the configuration, so that an unchanged book is not
    rebuilt from scratch on the next run): copy MathJax and add its folder to html_static_path."""
    expected = f"{URL_FOLDER}/{ENTRY}"
    if config.mathjax_path != expected:
        raise ExtensionError(f"mathjax_path={config.mathjax_path!r}: set `sphinx: config: mathjax_path: "
                             f"{expected}` in _config.yml, so that the pages load the copy this extension serves")
    staging = pathlib.Path(app.doctreedir).parent / "mathjax-static"
    copy_mathjax(es5_folder(), staging / URL_FOLDER)
    config.html_static_path = list(config.html_static_path) + [str(staging)]


def _is_thebe_asset(asset) -> bool:
    filename = str(getattr(asset, "filename", "") or "")
    body = str(getattr(asset, "attributes", {}).get("body", "") or "")
    return "thebe" in filename or "THEBE_JS_URL" in body


def drop_thebe_assets(app, pagename, templatename, context, doctree) -> None:
    """Leave sphinx-thebe's scripts and stylesheet out of the page (live code is off)."""
    if app.config.html_theme_options.get("launch_buttons", {}).get("thebe"):
        return  # someone turned live code on: keep what it needs
    for key in ("script_files", "css_files"):
        if key in context:
            context[key][:] = [asset for asset in context[key] if not _is_thebe_asset(asset)]


FONTAWESOME_TAG = re.compile(r'\s*<script defer src="[^"]*_static/scripts/fontawesome\.js[^"]*"></script>')


def drop_fontawesome_js(app, exception) -> None:
    """On build-finished: take the theme's fontawesome.js out of every page and out of _static."""
    if exception is not None or app.builder.format != "html":
        return
    outdir = pathlib.Path(app.outdir)
    for page in outdir.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        lighter = FONTAWESOME_TAG.sub("", text)
        if lighter != text:
            page.write_text(lighter, encoding="utf-8")
    for name in ("fontawesome.js", "fontawesome.js.map", "fontawesome.js.LICENSE.txt"):
        (outdir / "_static" / "scripts" / name).unlink(missing_ok=True)


def setup(app):
    app.connect("config-inited", stage_mathjax)
    app.connect("html-page-context", drop_thebe_assets, priority=900)
    app.connect("build-finished", drop_fontawesome_js)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
