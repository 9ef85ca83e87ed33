"""Grading the learners' notebooks: ``attention-book grade --chapter 3 submissions/*.ipynb --csv grades.csv``.

- ``results``: what each check's run came to, one JSON line per run (the checks write it, the grader reads it);
- ``assignment``: what a chapter asks for (its import cell, each exercise's function and check cell), shipped with
  the package so that grading needs no checkout;
- ``submission``: the learner's answer cells, found in a notebook downloaded from Colab;
- ``run``: one submission run in a fresh kernel with time limits, graded exercise by exercise;
- ``report``: the CSV (one row per submission) and one feedback page per learner;
- ``cli``: the ``attention-book`` command.

Only ``results`` is imported by the checks; nothing here is imported by ``import attention_book``, and the grader's
own needs (nbformat, nbclient, ipykernel: the package's ``grade`` extra) are imported when it runs.
"""
