#!/bin/bash
# 18 runs of sweep-e2e in 4 array tasks; submit with: sbatch THIS_FILE
#SBATCH --job-name=pipegrid-sweep-e2e
#SBATCH --array=0-3
#SBATCH --cpus-per-task=2
#SBATCH --time=01:30:00
#SBATCH --output=SCRATCH/results/slurm-%A_%a.log
set -euo pipefail
# Task T runs shard T/4 (the runs with run_index % 4 == T); resubmit failed tasks
# with sbatch --array=T1,T2,... THIS_FILE: each resumes where it stopped.
pipegrid sweep run ROOT/tests/data/sweep-e2e/experiment.toml --out SCRATCH/results --shard "$SLURM_ARRAY_TASK_ID/4" --jobs "${SLURM_CPUS_PER_TASK:-2}" --set network=analytic
# When every task has finished:
#   pipegrid sweep merge SCRATCH/results
#   pipegrid sweep report ROOT/tests/data/sweep-e2e/experiment.toml --out SCRATCH/results
