"""The base of the errors this package raises on purpose. Kept alone so importing it is free."""


class GpumemError(Exception):
    """An error jupyter_gpumem raises on purpose, with a message for people."""
