"""Exception classes, named after Polars' so that users catch what they already know."""


class GpujoinError(Exception):
    """Base class of every error gpujoin raises on purpose."""


class ColumnNotFoundError(GpujoinError):
    """A named column is not in the table."""


class SchemaError(GpujoinError, TypeError):
    """Column types that cannot work together (a join of an integer key with a string key)."""


class ComputeError(GpujoinError):
    """A computation could not be completed: failed ``validate``, an overflowing sum."""


class InvalidOperationError(GpujoinError, TypeError):
    """An operation that the column's type does not support (the sum of a string column)."""
