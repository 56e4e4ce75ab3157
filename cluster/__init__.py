"""``moco launch``: a command as a SLURM job (through submitit) that requeues itself and resumes."""
