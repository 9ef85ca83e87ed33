"""``python -m attention_book.grading``: the ``attention-book`` command."""
import sys

from .cli import main

if __name__ == "__main__":  # not when a worker process of --jobs imports the main module again
    sys.exit(main())
