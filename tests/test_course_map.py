"""The instructor guide's tables are generated from the chapters, and the guide is part of the book."""
import nbformat
import yaml
from conftest import ROOT, chapter_paths

import course_map
from book import colab_url


def test_generated_tables_are_up_to_date():
    text = course_map.GUIDE.read_text()
    assert course_map.render(text) == text, "book/instructors.md is out of date: run `make course-map`"


def test_course_map_lists_every_chapter_with_its_student_colab_link():
    table = course_map.course_map_table()
    for path in chapter_paths():
        meta = nbformat.read(path, as_version=4).metadata["attention_book"]
        assert f"[{meta['title']}]({path.name})" in table
        assert f"| {meta['time_minutes']} min |" in table
        assert colab_url(f"student/{path.name}") in table


def test_student_colab_links_point_at_the_repository():
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    slug = repo["url"].removeprefix("https://github.com/")
    assert colab_url("student/01_x.ipynb") == (
        f"https://colab.research.google.com/github/{slug}/blob/{repo['branch']}/student/01_x.ipynb")


def test_every_exercise_check_is_described():
    table = course_map.exercise_table()
    for path in chapter_paths():
        for cell in nbformat.read(path, as_version=4).cells:
            if "exercise-check" in cell.metadata.get("tags", []):
                assert "checks.check_" in cell.source
                name = cell.source.split("checks.", 1)[1].split("(", 1)[0]
                assert f"`{name}`" in table


def test_guide_is_in_the_book_and_student_versions_are_not():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    toc = (ROOT / "_toc.yml").read_text()
    assert "file: book/instructors" in toc
    assert "student" in config["exclude_patterns"] and "student/" not in toc
