{#- Removes everything the formula laid down, in reverse order, and nothing
    else: the scripts, epilog_sweep.py and localusers.backup, then epilog.d/
    and prolog.d/ only if they are empty (a site's own parts stay). It leaves
    slurm_config_dir, the ssh allow file, the log and the python3 package.
      salt 'slurm-work-*' state.apply epilog.clean test=True #}
{%- set tplroot = tpldir.split('/')[0] %}
{%- from tplroot ~ "/map.jinja" import epilog with context %}
{%- import_yaml tplroot ~ "/layout.yaml" as layout %}
{%- set confdir = epilog.slurm_config_dir %}

{%- for file in (layout.scripts | reverse | list) + (layout.data | reverse | list) %}

epilog-clean-{{ file.id }}-file-absent:
  file.absent:
    - name: {{ (confdir ~ '/' ~ file.path) | json }}
{%- endfor %}

{%- for sub in layout.directories | reverse %}
{%-   set dir = confdir ~ '/' ~ sub %}

epilog-clean-{{ sub | replace('.', '-') }}-empty-directory-absent:
  cmd.run:
    - name: rmdir -- {{ dir | quote }}
    - onlyif: test -d {{ dir | quote }} && test ! -L {{ dir | quote }} && test -z "$(ls -A -- {{ dir | quote }})"
    - require:
{%-   for file in layout.scripts + layout.data %}
      - file: epilog-clean-{{ file.id }}-file-absent
{%-   endfor %}
{%- endfor %}
