# The epilog formula: lays down the Slurm epilog/prolog chain.
#   salt 'slurm-work-*' state.apply epilog test=True   # preview
#   salt 'slurm-work-*' state.apply epilog             # lay down
include:
  - .config
  - .parts
