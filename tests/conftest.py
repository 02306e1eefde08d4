"""Every fast test writes chapter records into its own folder: a test that records (directly, or through
``table``/``show_figure``) never touches the book's ``_build/records``, whatever chapter an earlier test left
started (the folder is read at each write: lib.book.records.records_dir). Subprocesses inherit the variable.
The slow tests (the whole book, the smoke runs) write where a reader's run does."""
import pytest

LONGEST_FIRST = ("tests/book/test_whole_book.py", "tests/book/test_paper_smoke.py")


def pytest_collection_modifyitems(items):
    """The longest modules first. `make test` runs pytest-xdist with ``--dist loadscope``: each module whole
    on one worker, handed out in the order collected, so the whole book starts at once on one worker and the
    paper smoke run on the other, and the fast tests fill in behind them."""
    def rank(item):
        return next((i for i, path in enumerate(LONGEST_FIRST) if item.nodeid.startswith(path)), len(LONGEST_FIRST))

    items.sort(key=rank)


@pytest.fixture(autouse=True)
def records_in_a_temporary_folder(tmp_path_factory, monkeypatch, request):
    if not request.node.get_closest_marker("slow"):
        from lib.book.records import RECORDS_ENV

        monkeypatch.setenv(RECORDS_ENV, str(tmp_path_factory.mktemp("records")))
    yield


@pytest.fixture(scope="module")
def one_torch_thread():
    """Models of a few parameters: more intra-op threads only add synchronisation (and spin on a shared CPU).
    A module asks for it with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def offline_private_cache(tmp_path, monkeypatch):
    """The book's cache in the test's own folder and the hub offline: a test never touches the real cache or the
    network. A module asks for it with ``pytestmark = pytest.mark.usefixtures("offline_private_cache")``."""
    monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory):
    """A tiny Llama written as a GGUF file (tests/models/gguf_standins.py), once per module."""
    from tests.models.gguf_standins import write_tiny_llama_gguf

    return write_tiny_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", seed=0)
