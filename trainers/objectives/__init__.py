"""One module per trained method: its :class:`~trainers.objectives.base.Objective` subclasses (torch).

Each is named by its method's declaration in :mod:`trainers.methods` and imported when the loop
builds a stage.
"""
