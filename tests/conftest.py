"""The tests of every package share tests/strategies.py: pytest puts the folder of a conftest.py on the
import path, and this one is here for that."""
