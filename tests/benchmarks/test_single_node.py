"""Part `single_node` (benchmarks/single_node.py): every engine prepares the same rows."""

from __future__ import annotations

import pyarrow.parquet as pq

from benchmarks import generate, single_node


def test_every_engine_prepares_the_same_rows_and_writes_each_split(tmp_path):
    lake = tmp_path / "lake"
    data = generate.land(lake, 3000, seed=11, rows_per_file=1200)  # three CSV parts
    results = {}
    for engine in single_node.ENGINES:
        out = tmp_path / engine
        counts, checks = single_node.ENGINE_RUNS[engine](lake, out)
        results[engine] = {"rows_out": counts, "checks": checks}
        assert set(counts) == {"train", "validation", "test"}
        for split, rows in counts.items():
            table = pq.read_table(out / f"{split}.parquet")
            assert table.num_rows == rows
            assert {"id", "label", "num__distance", "cat__dest"} <= set(table.column_names)
    assert set(results) == {"pandas_sklearn", "polars", "polars_streaming", "duckdb"}
    kept = 3000 - data["null_labels"]
    for engine, r in results.items():
        checks = r["checks"]
        assert checks["rows"] == checks["ids"] == sum(r["rows_out"].values()) == kept, engine
        assert 0 < checks["delayed"] < kept and 0 < checks["sundays"] < kept, engine
        assert 0 < checks["planes_matched"] < checks["weather_matched"] <= kept, engine
    assert single_node.same_outputs(results) == []


def test_an_engine_that_prepared_other_rows_is_named_with_its_values():
    def result(sundays: int, rows_out: int) -> dict:
        checks = dict.fromkeys(single_node.CHECKS, 10) | {"sundays": sundays}
        return {"checks": checks, "rows_out": {"train": rows_out, "test": 2}}

    same = {"pandas_sklearn": result(3, 8), "polars": result(3, 8)}
    assert single_node.same_outputs(same) == []
    differ = single_node.same_outputs({**same, "duckdb": result(4, 8), "polars_streaming": result(3, 7)})
    assert len(differ) == 2
    assert differ[0].startswith("duckdb: ") and "'sundays': 4" in differ[0] and "'sundays': 3" in differ[0]
    assert differ[1].startswith("polars_streaming: ") and "'rows_out': 9" in differ[1]
