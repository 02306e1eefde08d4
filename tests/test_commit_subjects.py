"""Commit subjects stay short: at most 72 characters, the detail in the body.

The rule holds from the first commit written under it on; older subjects are left as history."""
import shutil
import subprocess

import pytest

from lib import REPO_ROOT

FIRST_UNDER_THE_RULE = "7834472"  # "lib.book.moved: forward_moved keeps old names of moved functions"
MAX_SUBJECT = 72


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True)


def test_commit_subjects_are_at_most_72_characters():
    if shutil.which("git") is None or git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout")
    if git("cat-file", "-e", f"{FIRST_UNDER_THE_RULE}^{{commit}}").returncode != 0:
        pytest.skip("a shallow clone without the first commit under the rule")
    log = git("log", "--format=%h %s", f"{FIRST_UNDER_THE_RULE}^..HEAD").stdout.splitlines()
    too_long = [line for line in log if len(line.split(" ", 1)[1]) > MAX_SUBJECT]
    assert log and too_long == []
