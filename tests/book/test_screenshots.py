"""scripts/screenshots.py's pure parts, without a browser: the text it reads from a page made safe to
print and to write, and the clip of each tile of a full-page capture."""
import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "screenshots.py"
_spec = importlib.util.spec_from_file_location("screenshots", SCRIPT)
screenshots = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(screenshots)

MATH_L = "\U0001D43F"  # MATHEMATICAL ITALIC CAPITAL L, which MathJax's output holds; in UTF-16 \ud835\udc3f


def test_a_lone_surrogate_from_a_cut_pair_becomes_a_replacement_character():
    # what json.loads makes of Chromium's reply when JavaScript sliced through the pair
    cut = json.loads('"D_KL(\\ud835"')
    assert cut == "D_KL(\ud835"
    text = screenshots.readable(cut)
    assert text == "D_KL(\ufffd"
    text.encode("utf-8")  # the UnicodeEncodeError of print() and write_text() is gone
    assert screenshots.readable("a\ud835\udc3fb") == f"a{MATH_L}b"  # a pair kept as two halves is joined
    assert screenshots.readable(f"plain, λ̂ and {MATH_L}") == f"plain, λ̂ and {MATH_L}"


def test_every_string_of_a_measurement_is_made_readable():
    measured = {"overflows": [{"kind": "equation", "width_px": 801, "text": "x\udc3f"}],
                "fonts": {"body": None}, "height_px": 10}
    clean = screenshots.readable_measure(measured)
    assert clean == {"overflows": [{"kind": "equation", "width_px": 801, "text": "x\ufffd"}],
                     "fonts": {"body": None}, "height_px": 10}
    json.dumps(clean, ensure_ascii=False).encode("utf-8")


def test_the_page_slices_text_by_characters_not_utf16_units():
    assert "Array.from(" in screenshots.MEASURE_JS and ".slice(0, 80).join('')" in screenshots.MEASURE_JS


def test_tiles_cover_the_page_at_its_own_position():
    clips = screenshots.tile_clips(390, 20001, tile=8000)
    assert [(c["x"], c["y"], c["width"], c["height"]) for c in clips] == [
        (0, 0, 390, 8000), (0, 8000, 390, 8000), (0, 16000, 390, 4001)]
    assert all(c["scale"] == 1 for c in clips)
    assert screenshots.tile_clips(1400, 8000, tile=8000) == [{"x": 0, "y": 0, "width": 1400, "height": 8000, "scale": 1}]
    assert screenshots.tile_clips(1400, 0) == []
