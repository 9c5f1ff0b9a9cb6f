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
{#- What the parts run beyond Debian's essential set: python3 (part 45's
    sweep), procps (pgrep, kill). #}
epilog-parts-tools-pkg-installed:
  pkg.installed:
    - pkgs:
      - python3
      - procps

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

epilog-{{ script.id }}-file-managed:
  file.managed:
    - name: {{ (confdir ~ '/' ~ script.path) | json }}
    - source: salt://{{ tplroot }}/files/{{ script.source }}
    - template: jinja
    - context:
        epilog: {{ epilog | json }}
        stage: {{ script.stage }}
    - user: root
    - group: root
    - mode: '0755'
    - backup: minion
    - check_cmd: /bin/bash -n
    - require:
      - file: epilog-config-localusers-backup-file-managed
      - file: epilog-config-{{ script.stage }}-d-file-directory
{%- endfor %}
