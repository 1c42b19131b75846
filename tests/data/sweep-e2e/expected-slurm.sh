#!/bin/bash
# 18 runs of sweep-e2e in 4 array tasks; submit with: sbatch THIS_FILE
#SBATCH --job-name=pipegrid-sweep-e2e
#SBATCH --array=0-3
#SBATCH --cpus-per-task=2
#SBATCH --time=01:30:00
#SBATCH --output=SCRATCH/results/slurm-%A_%a.log
set -euo pipefail
# Each task takes the runs with run_index % 4 == SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN;
# a task resubmitted after a failure resumes where it stopped.
pipegrid sweep run ROOT/tests/data/sweep-e2e/experiment.toml --out SCRATCH/results --shard auto --jobs "${SLURM_CPUS_PER_TASK:-2}" --set network=analytic
# When every task has finished:
#   pipegrid sweep merge SCRATCH/results
#   pipegrid sweep report ROOT/tests/data/sweep-e2e/experiment.toml --out SCRATCH/results
