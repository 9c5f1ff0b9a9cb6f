# The epilog formula: lays down the Slurm epilog/prolog chain.
#   salt 'slurm-work-*' state.apply epilog test=True   # preview
#   salt 'slurm-work-*' state.apply epilog             # lay down
# pam: sshd's account lines under epilog:pam_manage, or, off, none of them;
# schedule: the minion's schedule entries under epilog:schedule, or none
include:
  - .config
  - .parts
  - .pam
  - .schedule
