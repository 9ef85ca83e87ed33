# The two commands of the README. Both create .venv on first use and install requirements.txt into it.
.PHONY: book test test-unit test-fast test-slow test-numerics lint execute setup-cells chapter-headers nbgrader-metadata student course-map translations clean

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

# pip compiles every module it installs to bytecode one file at a time (about 75 of a fresh install's 140 s on 2
# cores); compileall does the same on every core (about 35 s). Files that do not compile (Python 2 fixtures inside
# some packages) are skipped, as pip skips them.
$(INSTALLED): requirements.txt requirements-no-deps.txt code/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --no-compile --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --no-compile --disable-pip-version-check --no-deps -r requirements-no-deps.txt
	$(PY) -m compileall -q -j 0 $(VENV)/lib > /dev/null || true
	touch $@

## make book: build the HTML site into _build/html from the notebooks' stored outputs, and its Chinese edition
## into _build/html/zh_CN from the catalogues in locales/zh_CN (scripts/translations.py)
book: $(INSTALLED)
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	$(PY) scripts/translations.py site
	@echo "The book is at $(CURDIR)/_build/html/index.html, its Chinese edition at $(CURDIR)/_build/html/zh_CN/index.html"

## make translations: after an English edit, update the Chinese catalogues (locales/zh_CN/LC_MESSAGES): a new
## message comes in untranslated, a changed one fuzzy; translate them (CONTRIBUTING.md), then make student
translations: $(INSTALLED)
	$(PY) scripts/translations.py extract

## make test: unit tests, nbval over every chapter, drift, setup cells, student versions, exercises,
## the instructor guide's tables, the simulated Colab runs (marker colab), the book build, and the site in
## headless Chromium (installed with apt when /usr/bin/chromium is missing). nbval checks the chapters twice:
## natively over book/, and in the simulated Colab run, which runs each chapter under another CPU's numerics
## (default kernels, MKL's compatible path, one thread) and compares every output with the stored one.
## --colab-alongside runs the colab tests in a second pytest process beside the rest (their kernel uses one
## thread, so run after the rest they would leave a core idle); its log is _build/colab.log, and its results
## join the summary, the exit status and the per-chapter time table (also in _build/chapter-times.md), and the
## test files in BALANCE (none today) run first in that process, so that both end at about the same time
## (tests/alongside.py). Once the
## second process runs, the first and its kernels use one thread each; and nbval runs natively only the chapters
## that compare the book's model with a transformers model (5 and 12: Colab's transformers is older than
## requirements.txt's); the Colab run covers every chapter, under nbval's rules and another CPU's numerics.
## The summary ends with make test's seconds (from make's start: install and lint included) against its budget.
## The slow tests (marker slow: nbgrader in an environment of its own, the timing claims under load) are left out,
## to keep make test within its budget of 13 minutes on 2 cores: make test-slow runs them
test: export ATTENTION_BOOK_MAKE_STARTED := $(shell date +%s)
test: lint
	@test -x /usr/bin/chromium || test -x "$${CHROMIUM:-/nonexistent}" || scripts/install_chromium.sh
	$(PY) -m pytest --colab-alongside -m "not slow"

## make test-unit: the inner loop, a couple of minutes: the tests without the markers notebook, model, slow,
## browser, build and colab (pytest.ini lists them), with Hypothesis's "unit" profile (a third of the examples,
## tests/_hypothesis.py); make test draws them all
test-unit: $(INSTALLED)
	HYPOTHESIS_PROFILE=unit $(PY) -m pytest -m "not colab and not notebook and not model and not browser and not build and not slow"

## make test-slow: the tests that make test leaves out (marker slow): nbgrader's generate_assignment, autograde and
## export on chapter 1 (tests/test_nbgrader.py; its first run on a machine installs nbgrader into
## ~/.cache/attention-book, a few minutes), and the chapters' timing claims while two processes spin on the CPU
## (tests/test_timing_claims_under_load.py, about a minute)
test-slow: $(INSTALLED)
	$(PY) -m pytest -m slow

## make test-numerics: nbval over book/ and student/ under every numerics configuration this CPU can run
## (kernels: default, avx2, avx512; 1 and 2 threads)
test-numerics: $(INSTALLED)
	$(PY) scripts/numerics.py

## make lint: ruff (ruff.toml) over the package, tests, scripts, benchmarks and the chapters' code cells, and
## actionlint over the forge's workflows (.github/workflows), with shellcheck on the shell of their run: steps
lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/actionlint -shellcheck=$(VENV)/bin/shellcheck

## make test-fast: the same without the simulated Colab runs (minutes faster)
test-fast: $(INSTALLED)
	$(PY) -m pytest -m "not colab and not slow"

## make execute: re-run every chapter and store its outputs, then rewrite the chapters' headers (time estimates,
## Colab links), the Colab notebooks (student versions and solved chapters, which keep the chapters' outputs) and
## the instructor guide's tables (then run make test twice)
execute: $(INSTALLED)
	$(PY) scripts/setup_cell.py
	$(PY) scripts/execute_notebooks.py
	$(PY) scripts/chapter_header.py
	$(PY) scripts/nbgrader_metadata.py
	$(PY) scripts/student.py
	$(PY) -m attention_book.grading.assignment
	$(PY) scripts/colab.py
	$(PY) scripts/chinese_notebooks.py
	$(PY) scripts/course_map.py

## make student: write the notebooks Colab opens, from book/NN_*.ipynb with the site's markup rendered as plain
## Markdown: student/NN_*.ipynb (exercises stubbed) and colab/NN_*.ipynb (solved), and the grader's copy of the
## exercises and checks (code/attention_book/grading/assignments.json), and their Chinese versions (colab/zh_CN/,
## student/zh_CN/: scripts/chinese_notebooks.py); commit them
student: $(INSTALLED)
	$(PY) scripts/student.py
	$(PY) -m attention_book.grading.assignment
	$(PY) scripts/colab.py
	$(PY) scripts/chinese_notebooks.py

## make chapter-headers: rewrite each chapter's header (time estimate, Colab links, notation link), the link in its
## Exercises section, and its metadata times and needs_chapters; then run make student (the Colab notebooks) and
## make course-map
chapter-headers: $(INSTALLED)
	$(PY) scripts/chapter_header.py
	$(PY) scripts/nbgrader_metadata.py

## make nbgrader-metadata: write nbgrader's cell metadata into each chapter (exercise cells: autograded answers; check
## cells: autograder tests); then run make student
nbgrader-metadata: $(INSTALLED)
	$(PY) scripts/nbgrader_metadata.py

## make course-map: rewrite the course-map table in book/instructors.md from the chapters' metadata
course-map: $(INSTALLED)
	$(PY) scripts/course_map.py

## make setup-cells: rewrite each chapter's first cell from _config.yml
setup-cells: $(INSTALLED)
	$(PY) scripts/setup_cell.py

clean:
	rm -rf _build
