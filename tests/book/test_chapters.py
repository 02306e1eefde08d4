"""Chapters declare themselves beside their source; discovery refuses a book whose parts disagree.

Each test writes a small book (``_toc.yml``, notebooks, declarations) into a temporary folder
and discovers it; the last ones check the real book.
"""
import textwrap

import pytest

from lib import REPO_ROOT
from lib.book.chapters import ChapterDeclarationError, chapters, discover, read_yaml
from lib.book.parameters import ParameterError

FRONT = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""

CELL = """
```{{code-cell}} ipython3
:tags: [parameters]

profile = "ci"
seed = 0
device = "auto"
{extra}
```

```{{code-cell}} ipython3
from lib.book import record, setup

cfg = setup("{cid}")
{body}
```
"""

DECLARATION = """
budget_ci_s: 30
parameters:
  steps: {type: int, min: 1, help: steps of the toy loop}
  rate: {type: float, allowed: [0.1, 0.5], help: a rate}
presets:
  ci: {steps: 3}
  paper: {steps: 300}
claims:
  - id: alpha.small
    statement: The toy error is tiny.
    source: This book (test)
    record: toy_error
    check: {at_most: 1e-10}
  - id: alpha.rows
    statement: Every row is counted.
    source: This book (test)
    record: rows_3
    check: {equals: 3}
"""

BODY = """record("toy_error", 0.0, claim="alpha.small")
for k in range(3):
    record(f"rows_{k + 1}", k + 1)"""

TOC = """format: jb-book
root: chapters/intro
parts:
  - caption: Toy
    chapters:
{entries}"""


def write_book(root, chapters_=("alpha",), listed=None, declaration=DECLARATION, extra="steps = None\nrate = 0.1",
               body=BODY):
    (root / "chapters").mkdir(parents=True, exist_ok=True)
    (root / "chapters" / "intro.md").write_text("# Toy book\n\nNot a notebook.\n")
    for cid in chapters_:
        (root / "chapters" / f"{cid}.md").write_text(FRONT + f"\n# Chapter {cid}\n" + CELL.format(
            cid=cid, extra=extra, body=body.replace("alpha.", f"{cid}.")))
        if declaration is not None:
            (root / "chapters" / f"{cid}.yml").write_text(textwrap.dedent(declaration).replace("alpha.", f"{cid}."))
    listed = chapters_ if listed is None else listed
    (root / "_toc.yml").write_text(TOC.format(entries="".join(f"      - file: chapters/{c}\n" for c in listed)))
    return root


def test_a_consistent_book_is_discovered(tmp_path):
    book = discover(write_book(tmp_path, ("alpha", "beta")))
    assert list(book) == ["alpha", "beta"]  # reading order of _toc.yml
    alpha = book["alpha"]
    assert alpha.title == "Chapter alpha" and alpha.budget_ci_s == 30
    assert alpha.path == "chapters/alpha.md" and alpha.declaration == "chapters/alpha.yml"
    assert alpha.spec.names == ["profile", "seed", "device", "steps", "rate"]
    assert alpha.spec.defaults() == {"profile": "ci", "seed": 0, "device": "auto", "steps": None, "rate": 0.1}
    assert alpha.spec["steps"].allow_none and not alpha.spec["rate"].allow_none
    assert alpha.resolve({"profile": "paper"})["steps"] == 300
    assert [c.id for c in alpha.claims] == ["alpha.small", "alpha.rows"]
    assert alpha.claims[0].check.decide(1e-11) and not alpha.claims[0].check.decide(1e-9)


def test_a_declaration_missing_from_the_toc_is_caught(tmp_path):
    write_book(tmp_path, ("alpha", "beta"), listed=("alpha",))
    with pytest.raises(ChapterDeclarationError, match=r"chapters/beta.yml declares a chapter that _toc.yml "
                                                      r"does not list: add '- file: chapters/beta'"):
        discover(tmp_path)


def test_a_listed_chapter_without_declaration_is_caught(tmp_path):
    write_book(tmp_path, declaration=None)
    with pytest.raises(ChapterDeclarationError, match=r"chapters/alpha.md has no declaration: write chapters/alpha.yml"):
        discover(tmp_path)


def test_a_toc_entry_without_a_file_is_caught(tmp_path):
    write_book(tmp_path, listed=("alpha", "gamma"))
    with pytest.raises(ChapterDeclarationError, match="_toc.yml lists 'chapters/gamma'"):
        discover(tmp_path)


def test_a_claim_whose_record_is_never_written_is_caught(tmp_path):
    write_book(tmp_path, body='record("toy_eror", 0.0)\nfor k in range(3):\n    record(f"rows_{k + 1}", k + 1)')
    with pytest.raises(ChapterDeclarationError, match=r"claim 'alpha.small' is decided by the record 'toy_error', "
                                                      r"which chapters/alpha.md never writes"):
        discover(tmp_path)


def test_a_record_pattern_must_match_the_claims_record(tmp_path):
    write_book(tmp_path, body='record("toy_error", 0.0, claim="alpha.small")\nrecord(f"cols_{3}", 3)')
    with pytest.raises(ChapterDeclarationError, match=r"'alpha.rows' is decided by the record 'rows_3'"):
        discover(tmp_path)


def test_record_calls_naming_claims_must_agree_with_the_declaration(tmp_path):
    write_book(tmp_path, body=BODY + '\nrecord("toy_error", 0.0, claim="alpha.smal")')
    with pytest.raises(ChapterDeclarationError, match=r"claim 'alpha.smal', which chapters/alpha.yml does not declare"):
        discover(tmp_path)
    write_book(tmp_path, body=BODY + '\nrecord("rows_3", 3, claim="alpha.small")')
    with pytest.raises(ChapterDeclarationError, match=r"records 'rows_3' for claim 'alpha.small', which is decided "
                                                      r"by the record 'toy_error'"):
        discover(tmp_path)


@pytest.mark.parametrize("extra, message", [
    ("steps = None", r"not assigned in the cell: rate"),
    ("steps = None\nrate = 0.1\nratio = 2", r"not declared: ratio"),
    ("steps = None\nrate = 0.3", r"default of parameter 'rate': allowed values are one of 0.1, 0.5; got 0.3"),
])
def test_the_parameters_cell_must_match_the_declaration(tmp_path, extra, message):
    write_book(tmp_path, extra=extra)
    with pytest.raises(ChapterDeclarationError, match=message):
        discover(tmp_path)


@pytest.mark.parametrize("old, new, message", [
    ("ci: {steps: 3}", "ci: {steps: 0}", r"preset ci.steps: parameter 'steps': allowed values are int >= 1"),
    ("ci: {steps: 3}", "ci: {}", r"profile 'ci' has no preset for steps"),
    ("ci: {steps: 3}", "ci: {steps: 3, stpes: 4}", r"preset ci.stpes names no parameter"),
    ("paper: {steps: 300}", "papr: {steps: 300}", r"unknown profile 'papr'"),
    ("{type: int, min: 1,", "{type: int, mininum: 1,", r"parameter 'steps' has unknown key\(s\) \['mininum'\]"),
    ("{type: int, min: 1,", "{type: integer, min: 1,", r"parameter 'steps' has type 'integer'"),
    ("budget_ci_s: 30", "budget_ci_s: -1", r"budget_ci_s .* must be a positive integer"),
    ("budget_ci_s: 30", "budget_ci_s: 30\nbudget: 40", r"unknown key\(s\) \['budget'\]"),
    ("check: {at_most: 1e-10}", "check: {below: 1e-10}", r"claim 'alpha.small': a check names exactly one of"),
    ("- id: alpha.small", "- id: beta.small", r"claim id 'beta.small' must start with 'alpha.'"),
    ("    record: toy_error\n", "", r"claim 'alpha.small' lacks \['record'\]"),
])
def test_declaration_mistakes_are_caught_with_the_file_named(tmp_path, old, new, message):
    assert old in DECLARATION
    write_book(tmp_path, declaration=DECLARATION.replace(old, new, 1))
    with pytest.raises(ChapterDeclarationError, match="chapters/alpha.yml.*" + message):
        discover(tmp_path)


def test_claim_ids_are_unique_across_the_book(tmp_path):
    write_book(tmp_path, ("alpha", "beta"))
    (tmp_path / "chapters" / "beta.yml").write_text(textwrap.dedent(DECLARATION).replace("id: alpha.small",
                                                                                        "id: beta.small"))
    with pytest.raises(ChapterDeclarationError, match="must start with 'beta.'"):
        discover(tmp_path)


def test_yaml_numbers_in_exponent_form_are_floats(tmp_path):
    path = tmp_path / "x.yml"
    path.write_text("a: 1e-10\nb: 1.0e-6\nc: 3\nd: '1e-10'\ne: 2E+3\n")
    assert read_yaml(path) == {"a": 1e-10, "b": 1e-6, "c": 3, "d": "1e-10", "e": 2000.0}


def test_the_book_discovers_every_chapter_with_its_declaration():
    book = chapters()
    landed = ["intro", "hilbert", "modes", "examples", "isan", "report"]  # new chapters join in toc order
    assert [cid for cid in book if cid in landed] == landed and list(book)[-1] == "report"
    for chapter in book.values():
        assert (REPO_ROOT / chapter.declaration).is_file()
    assert sum(len(c.claims) for c in book.values()) >= 60


def test_model_sizes_allowed_by_the_introduction_are_the_suites_sizes():
    from lib.models.mini_pythia import SIZES

    assert chapters()["intro"].spec["model_sizes"].item_allowed == tuple(SIZES)


CONSTRAINED = DECLARATION.replace("presets:", """constraints:
  - parameter: steps
    check: steps * rate <= 100
    help: the toy loop's work must fit
presets:""", 1)


def test_a_constraint_over_several_parameters_is_checked_after_presets(tmp_path):
    alpha = discover(write_book(tmp_path, declaration=CONSTRAINED))["alpha"]
    assert alpha.resolve({"steps": 1000, "rate": 0.1})["steps"] == 1000  # 100 <= 100 passes
    with pytest.raises(ParameterError, match=r"^parameter 'steps': allowed values satisfy steps \* rate <= 100 "
                                             r"\(with rate = 0.5\), the toy loop's work must fit; got 1000$"):
        alpha.resolve({"steps": 1000, "rate": 0.5})
    with pytest.raises(ParameterError, match=r"parameter 'steps'.*with rate = 0.5.*got 300"):
        alpha.resolve({"profile": "paper", "rate": 0.5})  # the paper preset's steps, with a given rate


@pytest.mark.parametrize("old, new, message", [
    ("check: steps * rate <= 100", "check: stepz * rate <= 100", r"names no parameter stepz"),
    ("parameter: steps", "parameter: stpes", r"names no parameter stpes"),
    ("check: steps * rate <= 100", "check: __import__('os')", r"only len, min, max, abs, sum, sorted, set, all, any may be called"),
    ("check: steps * rate <= 100", "check: steps.real <= 1", r"Attribute is not allowed"),
    ("check: steps * rate <= 100", "check: steps * rate <= 10", r"the 'paper' presets break a constraint: "
                                                                  r"parameter 'steps'"),
    ("    help: the toy loop's work must fit\n", "    hint: x\n", r"each constraint is a mapping with 'parameter'"),
])
def test_constraint_mistakes_are_caught_with_the_file_named(tmp_path, old, new, message):
    assert old in CONSTRAINED
    write_book(tmp_path, declaration=CONSTRAINED.replace(old, new, 1))
    with pytest.raises(ChapterDeclarationError, match="chapters/alpha.yml.*" + message):
        discover(tmp_path)


def test_readme_lists_every_chapter_of_the_toc():
    """The README's list of contents and _toc.yml agree: every chapter's title is named there."""
    import re

    from lib import REPO_ROOT

    readme = (REPO_ROOT / "README.md").read_text()
    contents = readme.split("## What the book contains", 1)[1].split("\n## ", 1)[0]
    for chapter in chapters().values():
        if chapter.id in ("intro", "report"):
            continue
        assert re.search(re.escape(chapter.title), contents), chapter.title


NAMED_VALIDATOR = DECLARATION.replace(
    "  rate: {type: float, allowed: [0.1, 0.5], help: a rate}",
    "  rate: {type: float, allowed: [0.1, 0.5], help: a rate}\n"
    "  model: {type: str, validate: 'lib.book.chapters:hub_model_source_problem', help: a model}", 1).replace(
    "  paper: {steps: 300}", "  paper: {steps: 300, model: /no/such/model/folder}", 1)


def test_a_preset_breaking_a_named_validator_fails_the_book_check_not_a_list(tmp_path):
    """The validators a declaration names in the library (``validate: lib.module:function``) are held to every
    default and preset by ``discover()`` (``lowrank-book check``, the tests); the command line's ``list`` and
    runs read the declarations without importing them (``library=False``), and still check a reader's value."""
    write_book(tmp_path, declaration=NAMED_VALIDATOR, extra="steps = None\nrate = 0.1\nmodel = 'suite'")
    with pytest.raises(ChapterDeclarationError, match=r"chapters/alpha.yml: preset paper.model: parameter 'model'"
                                                      r".*no such folder"):
        discover(tmp_path)
    alpha = discover(tmp_path, library=False)["alpha"]
    with pytest.raises(ParameterError, match="parameter 'model'"):
        alpha.resolve({"model": "/no/such/model/folder"})  # a reader's value: checked in full


def test_the_real_book_passes_the_library_validators_too():
    """What `lowrank-book check` runs: every default and preset against every validator the declarations name."""
    book = discover(REPO_ROOT)
    assert list(book) == list(chapters())


def test_a_run_of_one_chapter_reads_one_declaration():
    """`run modes` reads modes.yml alone (and the table of contents), imports none of the library's
    validators, torch or matplotlib; the book read later is made of the same chapter objects."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from lib.book import chapters as c\n"
            "from lib.book.runner import find_chapter\n"
            "modes = find_chapter('chapters/modes.md')\n"
            "assert find_chapter('modes') is modes\n"
            "print(sorted(c.Path(path).name for path in c._LOADED))  # the declarations read so far\n"
            "print(sorted(m for m in ('torch', 'matplotlib', 'scipy', 'transformers', 'papermill', 'lib.modes')"
            " if m in sys.modules))\n"
            "print(c.chapters()['modes'] is modes)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["['modes.md']", "[]", "True"], out.stdout
    with pytest.raises(ParameterError, match=r"unknown chapter 'modse' \(did you mean 'modes'\?\)"):
        __import__("lib.book.runner", fromlist=["find_chapter"]).find_chapter("modse")


def test_local_model_and_tokenizer_folders_are_checked_for_what_they_hold(tmp_path):
    from lib.book.chapters import hub_model_source_problem, tokenizer_folder_problem

    for fine in ("suite", "EleutherAI/pythia-70m", "gpt2"):
        assert hub_model_source_problem(fine) is None, fine
    assert "no such folder" in hub_model_source_problem(str(tmp_path / "nope"))
    assert "no such folder" in hub_model_source_problem("./nope")
    assert hub_model_source_problem("") == "an empty name"
    (tmp_path / "model" / "step0").mkdir(parents=True)
    assert "holds no revision of a model" in hub_model_source_problem(str(tmp_path / "model"))
    (tmp_path / "model" / "step0" / "config.json").write_text("{}")
    assert hub_model_source_problem(str(tmp_path / "model")) is None
    (tmp_path / "tok").mkdir()
    assert "holds no tokenizer" in tokenizer_folder_problem(str(tmp_path / "tok"))
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    assert tokenizer_folder_problem(str(tmp_path / "tok")) is None
    assert "is a file" in tokenizer_folder_problem(str(tmp_path / "tok" / "tokenizer.json"))


def test_settings_are_the_presets_and_the_smoke_presets_on_top():
    import pytest

    from lib.book.chapters import get_chapter

    intro = get_chapter("intro")
    assert intro.settings("ci", 3) == intro.resolve({"profile": "ci", "seed": 3, "device": "auto"})
    smoke = intro.settings("paper", 0, "cpu", smoke=True)
    assert smoke == intro.resolve(intro.with_smoke({"profile": "paper", "seed": 0, "device": "cpu"}))
    assert smoke != intro.settings("paper", 0, "cpu")
    with pytest.raises(ValueError, match="'intro' cut its paper profile.*profile 'ci'"):
        intro.settings("ci", 0, smoke=True)
