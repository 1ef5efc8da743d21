"""Losses: pure functions of tensors, one module per family, each docstring naming
the paper equation it implements."""
