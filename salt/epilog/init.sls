# The epilog formula: lays down the Slurm epilog/prolog chain.
#   salt 'slurm-work-*' state.apply epilog test=True   # preview
#   salt 'slurm-work-*' state.apply epilog             # lay down
# pam: sshd's account lines under epilog:pam_manage, or, off, none of them
include:
  - .config
  - .parts
  - .pam
