"""What the maintenance scripts and tests share: where the repository is, its chapters, and its public addresses.

The repository's address lives in one place, ``repository`` (``url`` and ``branch``) in ``_config.yml``; every
link to it (the Colab links, the student notes, the setup cells' install line) is derived here. So is every link to
the published site (the Colab notebooks' links to the site's pages, glossary and bibliography), from the site's one
address, ``html.baseurl`` in the same file.
"""
import functools
import pathlib

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent


def chapters(folder=ROOT / "book") -> list[pathlib.Path]:
    """The chapters, book/NN_name.ipynb (or NN_name.ipynb in another folder, such as a copy of book/), in order."""
    return sorted(pathlib.Path(folder).glob("[0-9][0-9]_*.ipynb"))


@functools.cache
def _config(config_path=ROOT / "_config.yml") -> dict:
    return yaml.safe_load(pathlib.Path(config_path).read_text())


def repository(config_path=ROOT / "_config.yml") -> dict:
    """_config.yml's ``repository``: {"url": "https://github.com/owner/name", "branch": "main"}."""
    repo = _config(config_path)["repository"]
    return {"url": repo["url"].rstrip("/"), "branch": repo.get("branch", "main")}


def site_url(relative: str = "", config_path=ROOT / "_config.yml") -> str:
    """The published site's address for a page, from ``html.baseurl``: site_url("book/notation.html")."""
    base = (_config(config_path).get("html") or {}).get("baseurl") or ""
    if not base.startswith("https://"):
        raise SystemExit(f"{config_path}: html.baseurl must be the site's https:// address, not {base!r}")
    return base.rstrip("/") + "/" + relative.lstrip("/")


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
