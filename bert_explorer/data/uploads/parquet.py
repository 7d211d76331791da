"""Parquet tables: the format Hugging Face datasets are stored in and exported to
(``Dataset.to_parquet``). A Parquet file is a table of typed columns, so it is read as records
(one per row) and then follows the same column rules as CSV and JSONL."""
from __future__ import annotations

from pathlib import Path

from .core import DataError

MAGIC = b"PAR1"  # every Parquet file starts and ends with these four bytes


def is_parquet(path: Path) -> bool:
    """A Parquet file by its extension or by its first bytes (an upload may have lost its name)."""
    if path.suffix.lower() in (".parquet", ".pq"):
        return True
    with open(path, "rb") as f:
        return f.read(4) == MAGIC


def parquet_table(path: Path, name: str) -> tuple[list[str], list[tuple[int, dict]]]:
    """(column names, [(row number, {column: value})]) of a Parquet file; nulls become None and
    list columns (tokens, tags, answers) Python lists, as in a JSONL record."""
    # only for Parquet: pyarrow is not among the GPU machine's packages (gpu/offline.py), which read the
    # other formats through this package
    import pyarrow as pa
    import pyarrow.parquet as pq

    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(-4, 2)
        tail = f.read(4)
    again = "export it again (with dataset.to_parquet('train.parquet') from Hugging Face datasets) and upload " \
            "the new file."
    if head != MAGIC or tail != MAGIC:
        where = "start" if head != MAGIC else "end"
        raise DataError(f"{name} is not a complete Parquet file (it does not {where} with the bytes PAR1, so it "
                        f"is {'another format' if where == 'start' else 'cut short'}); {again}")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as e:
        # pyarrow's own words, last clause only: its messages name the temporary file's path
        reason = (str(e).splitlines() or [""])[0].rsplit(": ", 1)[-1].strip().rstrip(".")
        reason = f" ({reason})" if reason and "/" not in reason and ". " not in reason else ""
        raise DataError(f"{name} cannot be read as Parquet{reason}: the file is damaged; {again}") from None
    columns = [str(c) for c in table.column_names]
    return columns, list(enumerate(table.to_pylist(), 1))
