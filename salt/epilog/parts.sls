{#- The runners (epilog.sh, prolog.sh) and their parts. Every script is checked
    with bash -n before it replaces the file in place, and the old file is kept
    in the minion's file_backup. #}
{%- set tplroot = tpldir.split('/')[0] %}
{%- from tplroot ~ "/map.jinja" import epilog with context %}
{%- set confdir = epilog.slurm_config_dir %}
{%- import_yaml tplroot ~ "/layout.yaml" as layout %}

include:
  - {{ tplroot }}.config

{#- The residue sweep: the execution module _modules/epilog.py, laid down
    verbatim so that part 45 runs the same code with the system python3 and
    no Salt. The master's (or salt-call's) file_roots must include the repo
    root for salt://_modules/. #}
{#- What the parts run: python3 (part 45's sweep), procps (pgrep), perl (part
    40's sender; perl-base is essential on Debian). #}
epilog-parts-tools-pkg-installed:
  pkg.installed:
    - pkgs:
      - python3
      - procps
      - perl-base

epilog-sweep-module-file-managed:
  file.managed:
    - name: {{ (confdir ~ '/epilog_sweep.py') | json }}
    - source: salt://_modules/epilog.py
    - user: root
    - group: root
    - mode: '0644'
    - backup: minion
    - check_cmd: /usr/bin/python3 -I -B -c "import sys; compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')"
    - require:
      - pkg: epilog-parts-tools-pkg-installed
      - file: epilog-config-epilog-d-file-directory

{%- for script in layout.scripts %}
{%-   set own_parts = [] %}
{%-   for other in layout.scripts if other.path.startswith(script.stage ~ '.d/') %}
{%-     do own_parts.append(other.path.split('/')[-1]) %}
{%-   endfor %}

epilog-{{ script.id }}-file-managed:
  file.managed:
    - name: {{ (confdir ~ '/' ~ script.path) | json }}
    - source: salt://{{ tplroot }}/files/{{ script.source }}
    - template: jinja
    - context:
        epilog: {{ epilog | json }}
        stage: {{ script.stage }}
        own_parts: {{ own_parts | json }}
    - user: root
    - group: root
    - mode: '0755'
    - backup: minion
    - check_cmd: /bin/bash -n
    - require:
      - file: epilog-config-localusers-backup-file-managed
      - file: epilog-config-ssh-allow-lock-file-managed
      - file: epilog-config-{{ script.stage }}-d-file-directory
{%- endfor %}

{%- for file in layout.retired %}

epilog-{{ file.id }}-retired-file-absent:
  file.absent:
    - name: {{ (confdir ~ '/' ~ file.path) | json }}
{%- endfor %}
