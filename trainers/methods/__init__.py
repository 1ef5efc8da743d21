"""One declaration per method (``METHOD``): its knobs, defaults, checks and stages, without torch.

What a stage trains is named as ``"trainers.objectives.NAME:Class"`` and lives in
:mod:`trainers.objectives`. A module beside the methods (``sct_distillation``) declares part of one.
"""
