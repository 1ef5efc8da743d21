"""One module per method: its knobs, its views and its loss."""
