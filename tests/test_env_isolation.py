"""The suite's own isolation (tests/conftest.py): what one test leaves in the environment
through farm's code does not reach the next."""

import os

from farm.catalog import files


def test_a_test_may_name_kernel_files_for_its_children():
    files.load([])  # nothing loaded: nothing named
    os.environ[files.FILES_ENV] = "/somewhere/else.py"  # as files.load does for child processes


def test_the_next_test_does_not_see_them():
    assert files.FILES_ENV not in os.environ
