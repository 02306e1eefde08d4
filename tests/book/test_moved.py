"""Old names of moved functions (lib.book.moved)."""
import sys
import types

import pytest

from lib.book.moved import forward_moved


def test_an_old_name_answers_with_the_object_at_its_new_home():
    new_home = types.ModuleType("lib_test_new_home")
    new_home.study = lambda: 42
    sys.modules["lib_test_new_home"] = new_home
    try:
        getter = forward_moved("lib.old", {"study": "lib_test_new_home"})
        assert getter("study") is new_home.study
    finally:
        del sys.modules["lib_test_new_home"]


def test_a_name_that_did_not_move_is_an_attribute_error_naming_module_and_name():
    getter = forward_moved("lib.old", {"study": "lib_test_new_home"})
    with pytest.raises(AttributeError, match=r"'lib\.old' has no attribute 'other'"):
        getter("other")


def test_the_new_home_is_imported_only_when_an_old_name_is_asked_for():
    forward_moved("lib.old", {"study": "lib_module_that_does_not_exist"})  # no import yet: no error
    getter = forward_moved("lib.old", {"study": "lib_module_that_does_not_exist"})
    with pytest.raises(ModuleNotFoundError):
        getter("study")
