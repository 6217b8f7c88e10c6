"""pandas, pyarrow and dask reading and writing tyr:// through fsspec."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow  # noqa: F401  (the Parquet engine)


def _frame(rows: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "id": np.arange(rows, dtype="int64"),
            "x": rng.normal(size=rows),
            "n": rng.integers(0, 1000, size=rows, dtype="int64"),
            "city": rng.choice(["oslo", "lyon", "kyiv", "lima"], size=rows),
            "year": rng.choice([2023, 2024, 2025], size=rows).astype("int64"),
        }
    )


def test_parquet_roundtrip(storage_options, tyr_fs, tyr_dir):
    df = _frame(50_000)
    url = f"tyr://{tyr_dir}/x.parquet"
    df.to_parquet(url, storage_options=storage_options, row_group_size=10_000)
    assert tyr_fs.isfile(url) and tyr_fs.size(url) > 0
    back = pd.read_parquet(url, storage_options=storage_options)
    pd.testing.assert_frame_equal(back, df)
    # A projection and a filter read only parts of the file (ranges).
    some = pd.read_parquet(url, storage_options=storage_options, columns=["id", "n"],
                           filters=[("year", "==", 2024)])
    want = df.loc[df["year"] == 2024, ["id", "n"]].reset_index(drop=True)
    pd.testing.assert_frame_equal(some.reset_index(drop=True), want)


def test_csv_roundtrip(storage_options, tyr_dir):
    df = _frame(5_000, seed=1)
    url = f"tyr://{tyr_dir}/x.csv"
    df.to_csv(url, index=False, storage_options=storage_options)
    back = pd.read_csv(url, storage_options=storage_options)
    pd.testing.assert_frame_equal(back, df, check_dtype=False, check_exact=False, rtol=1e-12)
    # Compressed, by the URL's suffix.
    df.to_csv(url + ".gz", index=False, storage_options=storage_options)
    back = pd.read_csv(url + ".gz", storage_options=storage_options)
    pd.testing.assert_frame_equal(back, df, check_dtype=False, check_exact=False, rtol=1e-12)


def test_pyarrow_dataset_partitioned(tyr_fs, tyr_dir):
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    filesystem = pafs.PyFileSystem(pafs.FSSpecHandler(tyr_fs))
    df = _frame(20_000, seed=2)
    table = pa.Table.from_pandas(df, preserve_index=False)
    base = f"{tyr_dir}/dataset"
    ds.write_dataset(
        table,
        base,
        filesystem=filesystem,
        format="parquet",
        partitioning=ds.partitioning(pa.schema([("year", pa.int64())]), flavor="hive"),
        max_rows_per_file=4_000,
        max_rows_per_group=2_000,
    )
    files = tyr_fs.find(base)
    assert {f.split("/")[-2] for f in files} == {"year=2023", "year=2024", "year=2025"}
    assert len(files) >= 6  # at most 4,000 rows a file

    dataset = ds.dataset(base, filesystem=filesystem, format="parquet", partitioning="hive")
    back = dataset.to_table().to_pandas()
    cols = list(df.columns)
    back = back[cols].sort_values("id").reset_index(drop=True)
    pd.testing.assert_frame_equal(back, df, check_dtype=False)

    # A filter on the partition key reads one directory only.
    only = dataset.to_table(filter=ds.field("year") == 2025, columns=["id", "x"]).to_pandas()
    want = df.loc[df["year"] == 2025, ["id", "x"]].reset_index(drop=True)
    pd.testing.assert_frame_equal(only.sort_values("id").reset_index(drop=True), want)

    # The same through pandas, given the pyarrow file system.
    via_pandas = pd.read_parquet(base, filesystem=filesystem)
    assert len(via_pandas) == len(df)


def test_dask_read_csv(storage_options, tyr_fs, tyr_dir):
    import dask
    import dask.dataframe as dd

    parts = [_frame(3_000, seed=10 + i) for i in range(4)]
    for i, part in enumerate(parts):
        part.to_csv(f"tyr://{tyr_dir}/csv/part-{i}.csv", index=False, storage_options=storage_options)
    tyr_fs.pipe_file(f"{tyr_dir}/csv/notes.txt", b"not a csv")
    whole = pd.concat(parts, ignore_index=True)

    # Blocks of 32 KiB: each file is read in several ranges cut at newlines.
    ddf = dd.read_csv(f"tyr://{tyr_dir}/csv/*.csv", storage_options=storage_options, blocksize=32_000)
    assert ddf.npartitions > len(parts)
    with dask.config.set(scheduler="threads", num_workers=2):
        total = ddf["n"].sum().compute()
        by_city = ddf.groupby("city")["n"].sum().compute().sort_index()
        computed = ddf.compute()
    assert total == whole["n"].sum()
    # dask and pandas may pick different string dtypes for the index: compare values.
    assert by_city.to_dict() == whole.groupby("city")["n"].sum().to_dict()
    computed = computed.sort_values("id", kind="stable").reset_index(drop=True)
    expected = whole.sort_values("id", kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(computed, expected, check_dtype=False, check_exact=False, rtol=1e-12)
