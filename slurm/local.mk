# slurm/local.mk -- sbatch scripts and the one-machine Slurm rig.
