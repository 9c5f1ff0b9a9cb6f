# The epilog formula: lays down the Slurm epilog/prolog chain.
#   salt 'slurm-work-*' state.apply epilog test=True   # preview
#   salt 'slurm-work-*' state.apply epilog             # lay down
{%- from tpldir ~ "/map.jinja" import epilog with context %}
include:
  - .config
  - .parts
{%- if epilog.pam_manage %}
  - .pam
{%- endif %}
