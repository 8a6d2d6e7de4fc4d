"""pytest fixtures for the torch engine: the real kvpoold of tests/python/conftest.py
(loaded under another module name, so the two conftest files do not collide)."""

import importlib.util
import os
import sys

_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "python", "conftest.py")
_spec = importlib.util.spec_from_file_location("kvpool_py_conftest", _path)
kvpool_py_conftest = importlib.util.module_from_spec(_spec)
sys.modules["kvpool_py_conftest"] = kvpool_py_conftest  # the tests reach its helpers by name
_spec.loader.exec_module(kvpool_py_conftest)

daemon_factory = kvpool_py_conftest.daemon_factory
