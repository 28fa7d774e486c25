"""Built-in executors: where the cells of a run execute (``local``, ``slurm``)."""
