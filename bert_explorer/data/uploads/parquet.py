"""Parquet tables: the format Hugging Face datasets are stored in and exported to
(``Dataset.to_parquet``). A Parquet file is a table of typed columns, so it is read as records
(one per row) and then follows the same column rules as CSV and JSONL."""
from __future__ import annotations

from pathlib import Path

from . import core
from .core import DataError, DEFAULT_MAX_BYTES
from .decode import _size

MAGIC = b"PAR1"  # every Parquet file starts and ends with these four bytes
AGAIN = "export it again (with dataset.to_parquet('train.parquet') from Hugging Face datasets) and use the new file."


def _whole(path: Path, name: str) -> None:
    """A Parquet file starts and ends with PAR1: one that does not is another format, or cut short."""
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(max(0, path.stat().st_size - 4))  # (a file shorter than 4 bytes ends where it starts)
        tail = f.read(4)
    if head != MAGIC or tail != MAGIC or path.stat().st_size < 12:  # PAR1, a footer's length, PAR1 at the least
        where = "start" if head != MAGIC else "end"
        raise DataError(f"{name} is not a complete Parquet file (it does not {where} with the bytes PAR1, so it "
                        f"is {'another format' if where == 'start' else 'cut short'}); {AGAIN}")


def is_parquet(path: Path) -> bool:
    """A Parquet file by its extension or by its first bytes (a data file may have lost its name)."""
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

    _whole(path, name)
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
        raise DataError(f"{name} cannot be read as Parquet{reason}: the file is damaged; {AGAIN}") from None
    columns = [str(c) for c in table.column_names]
    rows = table.to_pylist()
    _label_names(rows, table.schema.metadata or {})
    return columns, list(enumerate(rows, 1))


def parquet_tables(paths: list[Path], name: str,
                   max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[list[str], list[tuple[int, dict]]]:
    """:func:`parquet_table` of a table kept in several files (the shards of a Hub data set's split),
    bounded as one: every footer is read, and the whole measured, before any row is."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for p in paths:
        _whole(p, name)
    try:
        metas = [pq.ParquetFile(p).metadata for p in paths]
    except (pa.ArrowException, OSError):
        raise DataError(f"{name} cannot be read as Parquet: its footer is damaged; {AGAIN}") from None
    chunks = [m.row_group(i).column(j) for m in metas for i in range(m.num_row_groups)
              for j in range(m.row_group(i).num_columns)]
    _check_size(name, sum(m.num_rows for m in metas), sum(c.num_values for c in chunks),
                sum(c.total_uncompressed_size for c in chunks), "once decompressed", max_bytes)
    columns, rows = None, []
    for p in paths:
        cols, part = parquet_table(p, name, max_bytes)
        if columns is not None and cols != columns:
            raise DataError(f"{name}'s Parquet files do not share their columns ({', '.join(columns)} against "
                            f"{', '.join(cols)}); fetch the split again")
        columns = cols
        rows += [r for _, r in part]
    return columns or [], list(enumerate(rows, 1))


def _label_names(rows: list[dict], metadata: dict) -> None:
    """Class numbers made their names, where the file says them: a table written by Hugging Face
    datasets keeps its features in the schema's metadata, a ``ClassLabel`` with its names (SST-2's
    0/1 = negative/positive; CoNLL-2003's tags 0..8 = O, B-PER, ...), alone or in a list (a
    ``Sequence`` or ``List`` of them). A number outside the names (GLUE's -1 on a test split) is no label."""
    import json

    try:
        features = json.loads(metadata.get(b"huggingface", b"{}")).get("info", {}).get("features", {})
    except (ValueError, AttributeError, RecursionError):  # (metadata nested past Python's parser names nothing)
        return
    if not isinstance(features, dict):
        return
    for column, feature in features.items():
        inner, listed = feature, False
        if isinstance(feature, dict) and feature.get("_type") in ("Sequence", "List", "LargeList"):
            inner, listed = feature.get("feature"), True
        elif isinstance(feature, list) and len(feature) == 1:  # an older writer's list of one feature
            inner, listed = feature[0], True
        names = inner.get("names") if isinstance(inner, dict) and inner.get("_type") == "ClassLabel" else None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            continue

        def named(v):
            if not isinstance(v, int) or isinstance(v, bool):
                return v  # already a name (or missing)
            return names[v] if 0 <= v < len(names) else None
        for row in rows:
            if column in row:
                v = row[column]
                row[column] = [named(x) for x in v] if listed and isinstance(v, list) else (
                    v if listed else named(v))


def _check_size(name: str, rows: int, values: int, nbytes: int, how: str, max_bytes: int) -> None:
    if rows > core.MAX_ROWS:
        raise core.too_many_rows(name, rows)
    if values > core.MAX_CELLS:
        raise DataError(f"{name} holds {values:,} values (cells and list items), more than the {core.MAX_CELLS:,} "
                        f"a data file may have; use a sample of it, or only the columns it needs.")
    if nbytes > max_bytes:
        raise DataError(f"{name} holds {_size(nbytes)} {how}, larger than the limit of {_size(max_bytes)} "
                        f"(max_bytes={max_bytes}); use a sample of it or raise max_bytes.")


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
