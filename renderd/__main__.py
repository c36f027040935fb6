"""``python -m renderd``: the same as the ``renderd`` command."""

from renderd.cli import main

if __name__ == "__main__":
    main(prog_name="renderd")
