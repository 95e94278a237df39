"""kbear's integration tests: the same tests on whichever real brokers the machine offers.

A package (not a rootdir of loose modules) so that ``integration/conftest.py``
does not collide with ``tests/conftest.py`` when both directories run in one
pytest invocation (``pytest tests integration``).
"""
