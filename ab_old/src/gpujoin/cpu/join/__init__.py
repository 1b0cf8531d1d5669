"""CPU join algorithms."""
