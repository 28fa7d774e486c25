"""Layer 1, the spec: a suite file read, checked and expanded into cells.

Pure: no torch, no processes, no device probing; the device facts are passed in.
"""
