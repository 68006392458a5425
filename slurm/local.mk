# SPDX-License-Identifier: BSD-3-Clause
# slurm/local.mk -- sbatch scripts and the one-machine Slurm rig.
#
# slurm/hoop.sbatch is installed as a data file for users to copy; slurm/rig.sh stays
# in the source tree (it is a test tool, and needs root). tests/slurm_rig.sh brings the
# rig up, runs a 2-node job (and hoop.sbatch when tools/hooprun is built), and takes it
# down; it skips (77) where it lacks root, Slurm or network namespaces.
slurmdir = $(pkgdatadir)/slurm
dist_slurm_DATA = %reldir%/hoop.sbatch
EXTRA_DIST += %reldir%/rig.sh %reldir%/README.md tests/slurm_rig.sh
TESTS += tests/slurm_rig.sh
