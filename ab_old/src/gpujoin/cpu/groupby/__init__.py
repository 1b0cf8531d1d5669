"""CPU group-by algorithms."""
