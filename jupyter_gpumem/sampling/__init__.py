"""Reading the sources on a schedule: the per-kernel sampler thread and the cell hooks it and the
doctor add.
"""
