"""A full disk, said in one sentence: each library's own way of failing on a full file system is
recognised, the sentence says where, how much is free and what next, and a cache entry that
could not be kept is one warning on the page."""
import errno
import os

import pytest
import torch

from bert_explorer import full_disk
from bert_explorer.full_disk import CacheNotKept, DiskFull, is_disk_full, saving


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_torch_saves_short_write_is_recognised():
    """torch.save's zip writer on a full device says only "unexpected pos" (no errno): /dev/full
    answers every write with ENOSPC, as a full file system does."""
    with pytest.raises(RuntimeError, match="unexpected pos") as e:
        torch.save({"x": torch.zeros(100_000)}, "/dev/full")
    assert is_disk_full(e.value)
    with pytest.raises((RuntimeError, OSError)) as e:  # through a Python file, as pretraining saves its state
        with open("/dev/full", "wb") as f:
            torch.save({"x": torch.zeros(100_000)}, f)
    assert is_disk_full(e.value)


def test_each_librarys_words_for_a_full_disk_and_nothing_else():
    from safetensors import SafetensorError

    full = [OSError(errno.ENOSPC, "No space left on device"), OSError(errno.EDQUOT, "Disk quota exceeded"),
            # the messages safetensors, tokenizers (Rust io::Error) and numpy's tofile gave on a full tmpfs
            SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"),
            Exception("No space left on device (os error 28)"), OSError("5142144 requested and 153536 written")]
    assert all(is_disk_full(e) for e in full)
    not_full = [OSError(errno.EACCES, "Permission denied"), FileNotFoundError("x"), RuntimeError("out of memory"),
                ValueError("28 requested"), RuntimeError("[enforce fail at inline_container.cc:300] file not found")]
    assert not any(is_disk_full(e) for e in not_full)
    try:  # raised while handling a full disk: still a full disk
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("writer failed")
    except RuntimeError as e:
        assert is_disk_full(e)


def test_the_sentence_says_where_how_much_is_free_and_what_next(tmp_path, monkeypatch):
    monkeypatch.setattr(full_disk, "free_bytes", lambda folder: 12_345_678)
    with pytest.raises(DiskFull) as e:
        with saving(tmp_path, "save the checkpoint of step 4", lambda: "resume later", needed=87_100_000):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert str(e.value) == (f"no space left in {tmp_path} to save the checkpoint of step 4 (12.3 MB free, about "
                            "87.1 MB needed); resume later")
    assert e.value.errno == errno.ENOSPC and isinstance(e.value.__cause__, OSError)
    with pytest.raises(PermissionError):  # anything else passes unchanged
        with saving(tmp_path, "x", "y"):
            raise PermissionError("denied")
    assert [full_disk.size_text(n) for n in (512, 900_000, 12_345_678, 4.1e9, 250e9)] == \
        ["512 bytes", "900 kB", "12.3 MB", "4.1 GB", "250 GB"]


def test_a_cache_entry_that_could_not_be_kept_is_one_warning_and_the_result_goes_on(tmp_path):
    from bert_explorer import disk_cache

    def keep(path):
        with disk_cache.writing(path, optional="the layer vectors") as tmp:
            (tmp / "a.json").write_text("{}")
            raise OSError(errno.ENOSPC, "No space left on device")  # the disk fills up while writing
        return "the result"

    with pytest.warns(CacheNotKept) as record:
        assert keep(tmp_path / "entry") == "the result"
    assert len(record) == 1 and str(record[0].message).startswith(
        f"no space left in {tmp_path} to keep the layer vectors in the cache (")
    assert os.listdir(tmp_path) == []  # neither the entry nor its half-written folder
    with pytest.raises(OSError):  # an entry the caller needs is not optional: the error stays
        with disk_cache.writing(tmp_path / "needed"):
            raise OSError(errno.ENOSPC, "No space left on device")


def test_the_page_shows_a_cache_warning_as_one_st_warning():
    from streamlit.testing.v1 import AppTest

    def page():
        import warnings

        import streamlit as st

        from bert_explorer.app.state import show_mode
        from bert_explorer.full_disk import CacheNotKept

        show_mode()  # every page draws the sidebar's mode line

        warnings.warn(CacheNotKept("no space left in /cache to keep the probing result in the cache (1 MB free); "
                                   "the result is used all the same, and computed again next time"))
        st.write("the result")

    at = AppTest.from_function(page).run()
    assert not at.exception
    assert [w.value for w in at.warning] == ["No space left in /cache to keep the probing result in the cache (1 MB "
                                             "free); the result is used all the same, and computed again next time."]
    at.run()  # each time it happens, not only the first
    assert len(at.warning) == 1 and at.markdown[0].value == "the result"


def test_a_disk_with_no_byte_free_stops_a_new_run_at_its_lock_in_one_sentence(tmp_path, monkeypatch, capsys):
    """With 0 bytes free, the writer lock's first bytes failed: `pretrain`, `finetune` and a resume ended in a
    traceback from the lock and left a folder holding only the lock. One sentence now, and no folder."""
    from bert_explorer.cli import main
    from bert_explorer.runs import lock

    def full(fd, what, handing_over=False):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(lock, "_write_holder", full)
    out = tmp_path / "runs" / "new"
    code = main(["finetune", "--model", "minilm", "--train", "tiny:classification", "--epochs", "1",
                 "--output", str(out)])
    *_, last = capsys.readouterr().err.strip().splitlines()  # (after the estimate)
    assert code == 1 and last.startswith(f"bert-explorer: error: no space left in {out.parent} to start writing a run "
                                         "there (") and last.endswith("free some space, then run the same again")
    assert not out.exists()
