# Worked example for the compute nodes slurm-work-*. Every key but
# localusers is optional; salt/epilog/defaults.yaml documents each one and
# its default. localusers has none: a minion without it (or without this
# pillar) is refused by every epilog state, epilog.verify and epilog.sweep.
epilog:
  slurm_config_dir: /etc/slurm
  # Operators whose own jobs must never end their ssh sessions or processes.
  # je.kim and s.shin are examples (accounts the tests make): list yours;
  # each must resolve on the node.
  # Quote names YAML could read as something else (yes, no, 0123, null).
  localusers:
    - root
    - je.kim
    - s.shin
  ssh_allow_file: /etc/localusers
  # listfile: the chain's allow lines govern ssh; adopt: pam_slurm_adopt does
  # (the chain never edits ssh_allow_file); none: neither.
  ssh_access: listfile
  # Under listfile or adopt, true lets the state epilog.pam own sshd's account
  # lines (keep it false where another formula owns /etc/pam.d/sshd).
  pam_manage: false
  # A directory only root can write (Debian's /var/log/slurm belongs to slurm).
  log_file: /var/log/slurm-epilog/epilog.log
  record_file: /var/log/slurm-epilog/records.jsonl
