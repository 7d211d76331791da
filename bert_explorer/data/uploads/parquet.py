"""Parquet tables: the format Hugging Face datasets are stored in and exported to
(``Dataset.to_parquet``). A Parquet file is a table of typed columns, so it is read as records
(one per row) and then follows the same column rules as CSV and JSONL."""
from __future__ import annotations

from pathlib import Path

from . import core
from .core import DataError, DEFAULT_MAX_BYTES
from .decode import _size

MAGIC = b"PAR1"  # every Parquet file starts and ends with these four bytes


def is_parquet(path: Path) -> bool:
    """A Parquet file by its extension or by its first bytes (an upload may have lost its name)."""
    if path.suffix.lower() in (".parquet", ".pq"):
        return True
    with open(path, "rb") as f:
        return f.read(4) == MAGIC


def parquet_table(path: Path, name: str,
                  max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[list[str], list[tuple[int, dict]]]:
    """(column names, [(row number, {column: value})]) of a Parquet file; nulls become None and
    list columns (tokens, tags, answers) Python lists, as in a JSONL record.

    A Parquet file is compressed, and a value that repeats is stored once (dictionary encoding):
    a 133 kB file can hold 20 M rows that take 8 GB as Python objects. So its size is read from the
    footer first (rows, values, bytes decompressed), and the strings are read as dictionaries (each
    distinct value once) and measured before any row becomes a Python object."""
    # only for Parquet: pyarrow is not among the GPU machine's packages (tools/gpu_kit/offline.py),
    # which read the other formats through this package
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
        meta = pq.ParquetFile(path).metadata  # the footer only: no data is read
        groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
        chunks = [g.column(j) for g in groups for j in range(g.num_columns)]
        _check_size(name, max(meta.num_rows, sum(g.num_rows for g in groups)), sum(c.num_values for c in chunks),
                    sum(c.total_uncompressed_size for c in chunks), "once decompressed", max_bytes)
        strings = [meta.schema.column(j).path for j in range(meta.num_columns)
                   if meta.schema.column(j).physical_type == "BYTE_ARRAY"]
        table = pq.ParquetFile(path, metadata=meta, read_dictionary=strings).read()
        # the footer could understate; what was read is measured again, each repeated string at its full length
        parts = [_measure(chunk) for column in table.columns for chunk in column.chunks]
        _check_size(name, table.num_rows, sum(v for v, _ in parts), sum(b for _, b in parts),
                    "once its repeated values are written out", max_bytes)
    except (pa.ArrowException, OSError, ValueError, IndexError) as e:
        if isinstance(e, DataError):
            raise
        # pyarrow's own words, last clause only: its messages name the temporary file's path
        reason = (str(e).splitlines() or [""])[0].rsplit(": ", 1)[-1].strip().rstrip(".")
        reason = f" ({reason})" if reason and "/" not in reason and ". " not in reason else ""
        raise DataError(f"{name} cannot be read as Parquet{reason}: the file is damaged; {again}") from None
    columns = [str(c) for c in table.column_names]
    return columns, list(enumerate(table.to_pylist(), 1))


def _check_size(name: str, rows: int, values: int, nbytes: int, how: str, max_bytes: int) -> None:
    if rows > core.MAX_ROWS:
        raise core.too_many_rows(name, rows)
    if values > core.MAX_CELLS:
        raise DataError(f"{name} holds {values:,} values (cells and list items), more than the {core.MAX_CELLS:,} "
                        f"an upload may have; upload a sample of it, or only the columns it needs.")
    if nbytes > max_bytes:
        raise DataError(f"{name} holds {_size(nbytes)} {how}, larger than the limit of {_size(max_bytes)} "
                        f"(max_bytes={max_bytes}); upload a sample of it or raise max_bytes.")


def _measure(array) -> tuple[int, int]:
    """(values, bytes) of an Arrow array as Python will hold it: list items and struct fields are
    counted one by one, and a dictionary-encoded string at its length each time it is used."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(array, pa.DictionaryArray):
        lengths = pc.binary_length(array.dictionary)
        used = pc.sum(pc.take(lengths, array.indices)).as_py() or 0
        return len(array), used + 8 * len(array)
    if isinstance(array, pa.MapArray):
        (kv, kb), (iv, ib) = _measure(array.keys), _measure(array.items)
        return len(array) + kv + iv, kb + ib + 8 * len(array)
    if isinstance(array, (pa.ListArray, pa.LargeListArray, pa.FixedSizeListArray)):
        v, b = _measure(array.flatten())
        return len(array) + v, b + 8 * len(array)
    if isinstance(array, pa.StructArray):
        parts = [_measure(f) for f in array.flatten()]
        return len(array) + sum(v for v, _ in parts), sum(b for _, b in parts) + 8 * len(array)
    return len(array), array.nbytes
