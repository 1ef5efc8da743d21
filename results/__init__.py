"""Collected trials and what is made of them: lines, p-values, tables, figures.

The layer between ``trainers`` (the record's names) and ``sweep`` (the end-of-sweep
summary) and ``reports`` (paper tables, any sweep's tables and plots): both read
MLflow and build, test and render lines through this package, so a line is
labelled, counted, tested and shown the same way in every output. Nothing here
imports ``sweep`` or ``reports``.
"""
