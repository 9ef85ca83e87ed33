"""What the maintenance scripts and tests share: where the repository is, its chapters, and its public addresses.

The repository's address lives in one place, ``repository`` (``url`` and ``branch``) in ``_config.yml``; every
link to it (the Colab links, the student notes, the setup cells' install line) is derived here. So is every link to
the published site (the Colab notebooks' links to the site's pages, glossary and bibliography), from the site's one
address, ``html.baseurl`` in the same file.
"""
import functools
import pathlib

import nbformat
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent


def chapters(folder=ROOT / "book") -> list[pathlib.Path]:
    """The chapters, book/NN_name.ipynb (or NN_name.ipynb in another folder, such as a copy of book/), in order."""
    return sorted(pathlib.Path(folder).glob("[0-9][0-9]_*.ipynb"))


@functools.cache
def config(config_path=ROOT / "_config.yml") -> dict:
    """_config.yml, read once."""
    return yaml.safe_load(pathlib.Path(config_path).read_text())


def repository(config_path=ROOT / "_config.yml") -> dict:
    """_config.yml's ``repository``: {"url": "https://github.com/owner/name", "branch": "main"}."""
    repo = config(config_path)["repository"]
    return {"url": repo["url"].rstrip("/"), "branch": repo.get("branch", "main")}


# The edition whose site site_url addresses: "" for the English site, "zh_CN/" for the Chinese one, which is built
# into the English site's zh_CN/ folder (scripts/translations.py). Set by scripts/colab.py's edition().
SITE_EDITION = {"prefix": ""}


def site_url(relative: str = "", config_path=ROOT / "_config.yml") -> str:
    """The published site's address for a page, from ``html.baseurl``: site_url("book/notation.html"), in the
    edition that SITE_EDITION names."""
    base = (config(config_path).get("html") or {}).get("baseurl") or ""
    if not base.startswith("https://"):
        raise SystemExit(f"{config_path}: html.baseurl must be the site's https:// address, not {base!r}")
    return base.rstrip("/") + "/" + SITE_EDITION["prefix"] + relative.lstrip("/")


def blob_url(relative: str) -> str:
    """The repository's web page for a file, e.g. blob_url("book/01_single_head.ipynb")."""
    repo = repository()
    return f"{repo['url']}/blob/{repo['branch']}/{relative}"


def raw_url(relative: str) -> str:
    """The address of a file's own bytes in the repository (an image that a Colab notebook shows)."""
    repo = repository()
    return f"{repo['url']}/raw/{repo['branch']}/{relative}"


def colab_url(relative: str) -> str:
    """The address that opens a notebook of the repository in Google Colab."""
    repo = repository()
    slug = repo["url"].removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{slug}/blob/{repo['branch']}/{relative}"


def package_location(config_path=ROOT / "_config.yml") -> str:
    """pip's address of the package: the repository's code/ folder on its branch."""
    repo = repository(config_path)
    return f"git+{repo['url']}@{repo['branch']}#subdirectory=code"


def is_claim_cell(cell) -> bool:
    """A code cell that checks the chapter's claims: it calls ``claim(`` and imports, if at all, only after its first
    call (the cell that imports ``claim`` and computes is not one). Claim cells are hidden on the site
    (tests/test_chapter_hygiene.py) and titled forms in Colab (scripts/colab.py)."""
    return (cell.cell_type == "code" and "claim(" in cell.source
            and "import" not in cell.source.split("claim(")[0])


def notebook_text(nb) -> str:
    """A notebook as the repository stores it (nbformat's text, ending in a newline, as nbformat.write writes it)."""
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def write_generated(wanted: dict[pathlib.Path, str], folder: pathlib.Path | None, check: bool,
                    remedy: str = "") -> int:
    """Bring generated files up to date: ``wanted`` is {path: the text it must hold}; with ``folder``, any other
    ``*.ipynb`` there is an orphan and goes (pass None when only some files were asked for, or when the files are
    the sources themselves, such as book/'s chapters). ``check``: change nothing, list what is out of date (with
    ``remedy``, the command that fixes it) and return 1 if anything is; otherwise write, list what changed, and
    return 0."""
    stale = [path for path, text in wanted.items() if not (path.exists() and path.read_text() == text)]
    orphans = sorted(set(folder.glob("*.ipynb")) - set(wanted)) if folder is not None else []
    if not check:
        for path in stale:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(wanted[path])
        for path in orphans:
            path.unlink()
    fix = f": run `{remedy}`" if remedy else ""
    for path in stale:
        print(f"{_shown(path)}: {f'out of date{fix}' if check else 'written'}")
    for path in orphans:
        print(f"{_shown(path)}: {'has no chapter' if check else 'removed (no chapter)'}")
    return 1 if check and (stale or orphans) else 0


def write_chapter_copies(argv, folder: pathlib.Path, render) -> int:
    """The main of a generator that writes one notebook per chapter into ``folder`` (``render(chapter)`` is its
    text): every chapter's, or only those named in ``argv`` (then other files in the folder are left alone);
    ``--check`` in argv reports instead of writing (``write_generated``)."""
    only = [pathlib.Path(a).name for a in argv if a.endswith(".ipynb")]
    wanted = {folder / c.name: render(c) for c in chapters() if not only or c.name in only}
    return write_generated(wanted, None if only else folder, check="--check" in argv, remedy="make student")


def _shown(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
