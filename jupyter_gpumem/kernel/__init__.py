"""The kernel's side of the user's commands: the ``%gpumem`` magic and the panel's comm."""
