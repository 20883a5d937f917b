"""Integrations of qeval with training libraries (transformers)."""
