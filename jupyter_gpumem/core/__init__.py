"""What everything else stands on: typed readings and the memory metrics, units, errors, the %gpumem
argument parser, files written whole, JAX's variable table, attribution, sites and trace files.
"""
