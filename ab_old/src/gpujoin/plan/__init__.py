"""Planning: normalize inputs, validate keys and types, choose the backend and the algorithm."""
