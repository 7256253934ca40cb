"""The ``accordrun`` console command of the pip-installed package.

``pip install .`` ships the launcher binary as ``accord/bin/accordrun``;
this entry point replaces the Python process with it, passing the
arguments on unchanged. It also sets ``ACCORDRUN_PYTHON`` to this
interpreter (unless already set), so ``accordrun --check-build`` looks for
numpy and torch where this package is installed.
"""

import os
import sys
from pathlib import Path


def binary_path() -> Path:
    """Path of the accordrun binary that belongs to this package."""
    # Not resolve(): in a build tree this module is a symlink into the
    # sources, while the binary sits beside the link.
    return Path(os.path.abspath(__file__)).parent / "bin" / "accordrun"


def main() -> None:
    """Runs ``accordrun`` with this process's arguments; never returns."""
    binary = binary_path()
    if not os.access(binary, os.X_OK):
        sys.stderr.write(f"accordrun: {binary} is missing or not executable; reinstall accord\n")
        sys.exit(127)
    os.environ.setdefault("ACCORDRUN_PYTHON", sys.executable)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(str(binary), [str(binary), *sys.argv[1:]])


if __name__ == "__main__":
    main()
