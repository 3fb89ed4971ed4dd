"""`python -m qwenmem_tui` runs the `qwenmem` command."""

from qwenmem_tui.cli import main

if __name__ == "__main__":
    main()
