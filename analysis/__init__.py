"""Pure analysis: DataFrames and dataclasses in, DataFrames and dataclasses out. No I/O."""
