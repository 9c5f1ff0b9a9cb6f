{#- sshd's account lines under epilog:ssh_access adopt or listfile, when the
    pillar asks for them (epilog:pam_manage): the operators' list, then the
    lines in /etc/pam.d/sshd, in that order, so that after each step root
    and the operators can still log in. The lines are the operators' list
    first, then the gate the mode picks: pam_slurm_adopt under adopt, the
    allow file (ssh_allow_file) under listfile. epilog.pam_file builds the
    new sshd file and judges the stack it makes before anything is written:
    a stack that would lock out an operator, or let a login past the gate,
    fails the render, and nothing changes. Each file keeps a backup in the
    minion's cache (file.list_backups). With pam_manage off, this takes the
    formula's lines out of /etc/pam.d/sshd again, and touches nothing else.
      salt 'slurm-work-*' state.apply epilog.pam test=True #}
{%- set tplroot = tpldir.split('/')[0] %}
{%- from tplroot ~ "/map.jinja" import epilog, operators with context %}
{#- epilog.pam_file is the module's: a minion that has not synced it yet
    (the first apply of epilog syncs it) can hold none of the formula's
    lines, and needs the sync before it can have them. #}
{#- Off, and no line of the formula's in sshd (file.search: one read, no
    settings render): nothing to take out. #}
{%- set marked = salt['file.file_exists']('/etc/pam.d/sshd')
                 and salt['file.search']('/etc/pam.d/sshd', '# BEGIN epilog formula', ignore_if_missing=True) %}
{%- if not epilog.pam_manage and not marked %}
{%-   set sshd = none %}
{%- elif 'epilog.pam_file' in salt %}
{%-   set sshd = salt['epilog.pam_file']() %}
{%- elif epilog.pam_manage %}
{{-   raise('epilog:pam_manage is on, but the epilog module is not on this minion yet: '
            ~ 'apply epilog once (it syncs the module), or run saltutil.sync_modules, then apply again') }}
{%- else %}
{%-   set sshd = none %}
{%- endif %}
{%- set nl = '
' %}
{%- if epilog.pam_manage %}

epilog-pam-operators-file-managed:
  file.managed:
    - name: {{ epilog.pam_operators_file | json }}
    - contents: {{ operators | join(nl) | json }}
    - user: root
    - group: root
    - mode: '0600'
    - follow_symlinks: False
    - backup: minion

epilog-pam-sshd-file-managed:
  file.managed:
    - name: /etc/pam.d/sshd
    - contents: {{ sshd | json }}
    - user: root
    - group: root
    - mode: '0644'
    - follow_symlinks: False
    - backup: minion
    - require:
      - file: epilog-pam-operators-file-managed
{%- elif sshd is not none and salt['file.file_exists']('/etc/pam.d/sshd') and sshd != salt['file.read']('/etc/pam.d/sshd') %}

epilog-pam-sshd-file-managed:
  file.managed:
    - name: /etc/pam.d/sshd
    - contents: {{ sshd | json }}
    - follow_symlinks: False
    - backup: minion
{%- else %}

epilog-pam-sshd-test-nop:
  test.nop:
    - name: epilog:pam_manage is off and /etc/pam.d/sshd holds none of the formula's lines
{%- endif %}
