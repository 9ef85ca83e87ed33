"""Sphinx extension: in a translated build (the Chinese site), translate the two kinds of text that Sphinx's own
gettext step never sees.

- The captions of the table of contents' parts ("Part II: what heads do"): sphinx-external-toc puts the toctrees into
  the root page after Sphinx has translated it, so a transform that runs after it translates their captions, from
  the root page's catalogue (where Sphinx's gettext builder, which sees the toctrees, puts them).
- The alt texts of the figures that code cells draw (metadata mystnb.image.alt): MyST-NB puts them on the images when
  it writes the page, after translation, so they are translated when the page's doctree is resolved, from the page's
  catalogue (scripts/translations.py adds them to it).

An English build has no catalogues, and nothing changes.
"""
from docutils import nodes
from sphinx import addnodes
from sphinx.locale import init as init_locale
from sphinx.transforms import SphinxTransform
from sphinx.util.i18n import docname_to_domain

def catalogue(app, docname):
    """The gettext function of ``docname``'s catalogue in the build's language, or None in an English build."""
    config = app.config
    if not config.language or config.language == "en":
        return None
    dirs = [app.srcdir / directory for directory in config.locale_dirs]
    translations, found = init_locale(dirs, config.language, docname_to_domain(docname, config.gettext_compact))
    return translations.gettext if found else None


class TranslateTocCaptions(SphinxTransform):
    default_priority = 101  # after sphinx-external-toc's InsertToctrees (100)

    def apply(self, **kwargs) -> None:
        if self.env.docname != self.config.root_doc:
            return
        gettext = catalogue(self.app, self.env.docname)
        if gettext is None:
            return
        for toctree in self.document.findall(addnodes.toctree):
            if toctree.get("caption"):
                toctree["caption"] = gettext(toctree["caption"])


def translate_alt_texts(app, doctree, docname) -> None:
    gettext = catalogue(app, docname)
    if gettext is None:
        return
    for image in doctree.findall(nodes.image):
        if image.get("alt"):
            image["alt"] = gettext(image["alt"])


def setup(app):
    app.add_transform(TranslateTocCaptions)
    app.connect("doctree-resolved", translate_alt_texts)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
