"""The store: one schema over DuckDB (default, embedded) or PostgreSQL (shared).

Modules: schema (tables), db (engines, short-lived connections, lock retry), migrations,
ingest (bulk writes and the spool), catalog (seeds), queries (intent-named reads → DataFrames).
"""
