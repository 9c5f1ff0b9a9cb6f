{#- The runners (epilog.sh, prolog.sh) and their parts. Every script is checked
    with bash -n before it replaces the file in place, and the old file is kept
    in the minion's file_backup. #}
{%- set tplroot = tpldir.split('/')[0] %}
{%- from tplroot ~ "/map.jinja" import epilog with context %}
{%- set confdir = epilog.slurm_config_dir %}
{%- set scripts = [
      ('runner-epilog', 'epilog.sh', 'runner.sh.jinja', 'epilog'),
      ('runner-prolog', 'prolog.sh', 'runner.sh.jinja', 'prolog'),
      ('part-40-lastuserjob-processes', 'epilog.d/40-lastuserjob-processes', 'epilog.d/40-lastuserjob-processes.jinja', 'epilog'),
      ('part-41-lastuserjob-ssh', 'epilog.d/41-lastuserjob-ssh', 'epilog.d/41-lastuserjob-ssh.jinja', 'epilog'),
      ('part-42-lastuserjob-cleanup', 'epilog.d/42-lastuserjob-cleanup', 'epilog.d/42-lastuserjob-cleanup.jinja', 'epilog'),
      ('part-45-stale-x-display', 'epilog.d/45-stale-x-display', 'epilog.d/45-stale-x-display.jinja', 'epilog'),
      ('part-50-exclusive-ssh', 'prolog.d/50-exclusive-ssh', 'prolog.d/50-exclusive-ssh.jinja', 'prolog'),
    ] %}

include:
  - {{ tplroot }}.config

{#- The residue sweep: the execution module _modules/epilog.py, laid down
    verbatim so that part 45 runs the same code with the system python3 and
    no Salt. The master's (or salt-call's) file_roots must include the repo
    root for salt://_modules/. #}
epilog-sweep-python3-pkg-installed:
  pkg.installed:
    - name: python3-minimal

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
      - pkg: epilog-sweep-python3-pkg-installed
      - file: epilog-config-epilog-d-file-directory

{%- for id, path, source, stage in scripts %}

epilog-{{ id }}-file-managed:
  file.managed:
    - name: {{ (confdir ~ '/' ~ path) | json }}
    - source: salt://{{ tplroot }}/files/{{ source }}
    - template: jinja
    - context:
        epilog: {{ epilog | json }}
        stage: {{ stage }}
    - user: root
    - group: root
    - mode: '0755'
    - backup: minion
    - check_cmd: /bin/bash -n
    - require:
      - file: epilog-config-localusers-backup-file-managed
      - file: epilog-config-{{ stage }}-d-file-directory
{%- endfor %}
