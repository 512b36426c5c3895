# The stand-in device's greedy draw (see _simdraw.pyx): a module of one Python-level
# function, nothing for other Cython modules to cimport.
