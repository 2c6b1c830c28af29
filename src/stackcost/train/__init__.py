"""Training at every level: the same weights and data, trained through each backend."""
