"""The TPC-H job: TPC-H queries 3, 5, 7, 10, 12, 18, 19 and paper 001's lineitem-orders join,
run through gpujoin and validated against DuckDB on the same Parquet files."""
