base:
  'slurm-work-*':
    - epilog
