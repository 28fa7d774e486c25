"""Layer 4, running cells: the runner (parent), the worker and data-parallel ranks (children), timing, peaks."""
