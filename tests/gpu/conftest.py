"""The harness of tests/python/conftest.py for the GPU suites of this folder.

The same rules hold (a failing rank ends the job, a watchdog on every test,
accord initialised once per session); its helpers (conftest, torch_helpers)
are importable from here too.
"""

import importlib.util
import pathlib
import sys

_PYTHON_TESTS = pathlib.Path(__file__).resolve().parent.parent / "python"
sys.path.insert(0, str(_PYTHON_TESTS))

_spec = importlib.util.spec_from_file_location("accord_python_harness", _PYTHON_TESTS / "conftest.py")
_harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_harness)

pytest_runtest_logreport = _harness.pytest_runtest_logreport
_watchdog = _harness._watchdog
accord_initialized = _harness.accord_initialized
rank = _harness.rank
size = _harness.size
