"""What test modules share: records, fakes, a watched run, the CLI in a subprocess, servers, waiting.

The one home of helpers used by more than one test module: a test module never imports another test module
(tests/unit/test_suite_layout.py checks it), and a conftest holds only fixtures and hooks.
"""
