"""One declaration per method (``METHOD``): its knobs, defaults, checks and stages, without torch.

Each module here is one method of :data:`trainers.registry.METHODS`. What a stage trains is named as
``"trainers.objectives.NAME:Class"`` and lives in :mod:`trainers.objectives`.
"""
