

def test_a_dotted_source_may_wrap_after_its_dots_and_underscores():
    from lib.book.report import breakable

    assert breakable("This book (lib.isan.rare_branch)") == "This book (lib.<wbr>isan.<wbr>rare_<wbr>branch)"
    assert breakable("Lemma 4.10") == "Lemma 4.10"  # a dot before a digit stays
    assert breakable("This book (`lib.modes.Modes.effective`)") == "This book (`lib.modes.Modes.effective`)"
    assert breakable("Eq. $A_{k}$") == "Eq. $A_{k}$"
