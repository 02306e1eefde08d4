"""Records (glue + JSON) and the claims registry."""
import json

import numpy as np
import pytest

from lib import claims, record


@pytest.fixture
def rec_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(record.RECORDS_ENV, str(tmp_path))
    record.start("intro", {"profile": "ci"})
    return tmp_path


def test_record_writes_plain_json(rec_dir):
    record.record("x", np.float64(1.5))
    record.record("arr", np.arange(3))
    record.record_meta(device="cpu")
    data = json.loads((rec_dir / "intro.json").read_text())
    assert data["values"]["x"] == {"value": 1.5}
    assert data["values"]["arr"]["value"] == [0, 1, 2]
    assert data["meta"] == {"profile": "ci", "device": "cpu"}
    with pytest.raises(ValueError, match="finite"):
        record.record("bad", float("nan"))
    with pytest.raises(TypeError, match="record\\(\\) takes"):
        record.record("bad", object())


def test_record_links_claims_and_rejects_mismatches(rec_dir):
    record.record("corpus_megabytes", 12.0, claim="intro.corpus-size")
    with pytest.raises(KeyError, match="unknown claim"):
        record.record("corpus_megabytes", 12.0, claim="intro.nope")
    with pytest.raises(ValueError, match="decided by the record 'corpus_megabytes'"):
        record.record("other_name", 12.0, claim="intro.corpus-size")
    result = claims.evaluate(claims.get_claim("intro.corpus-size"), record.load_records("intro", rec_dir))
    assert result.status == "pass" and result.value == 12.0


def test_checks_decide_both_ways():
    assert claims.close(1.0, atol=1e-10).decide(1.0 + 1e-12)
    assert not claims.close(1.0, atol=1e-10).decide(1.0 + 1e-8)
    assert claims.close(100.0, rtol=0.01).decide(100.9) and not claims.close(100.0, rtol=0.01).decide(102)
    assert claims.at_most(2).decide(2) and not claims.at_most(2).decide(2.1)
    assert claims.at_least(2).decide(2) and not claims.at_least(2).decide(1.9)
    assert claims.between(0, 1).decide(0.5) and not claims.between(0, 1).decide(1.5)
    assert claims.equals(0).decide(0) and not claims.equals(0).decide(1)
    for check in (claims.close(0, 1), claims.at_most(1), claims.between(0, 1)):
        assert not check.decide(None) and not check.decide("0.5") and not check.decide(float("nan"))


def test_registry_is_consistent():
    from lib.profiles import chapters

    ids = [c.id for c in claims.CLAIMS]
    assert len(ids) == len(set(ids))
    for c in claims.CLAIMS:
        assert c.chapter in chapters(), c.id
        assert c.id.startswith(c.chapter + "."), c.id
        assert c.statement and c.source and c.record
    assert claims.evaluate(claims.CLAIMS[0], None).status == "not run"


def test_every_chapter_spec_is_a_page_of_the_book():
    """A spec (and so any claim) whose page is missing from _toc.yml would be 'not run' forever
    and its report link would break the -W build."""
    from lib.book import source_path, toc_files
    from lib.profiles import chapters

    pages = set(toc_files())
    for chapter in chapters().values():
        page = chapter.path.rsplit(".", 1)[0]
        assert page in pages, f"{chapter.id}: {page} is not listed in _toc.yml"
        assert source_path(page).name == chapter.path.rsplit("/", 1)[-1]


def test_figures_are_rendered_to_png_whatever_the_backend():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    png = record.figure_png(fig)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    record.show_figure("f", fig)  # outside a kernel: only closes the figure
    assert not plt.fignum_exists(fig.number)


def test_labels_are_unique_across_the_book():
    """Sphinx labels (figure/table ``:name:`` and ``(label)=`` targets) live in one namespace for
    the whole book: a label used by two chapters is a warning, and the -W build fails on it."""
    import re

    from lib.book import source_path, toc_files

    seen: dict[str, str] = {}
    for page in toc_files():
        text = source_path(page).read_text(encoding="utf-8")
        labels = re.findall(r"^:name:\s*(\S+)\s*$", text, re.M) + re.findall(r"^\(([^)\s]+)\)=\s*$", text, re.M)
        for label in labels:
            assert label not in seen, f"label {label!r} is defined in both {seen[label]} and {page}"
            seen[label] = page
