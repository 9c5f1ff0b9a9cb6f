{#- The directories of the chain and the localusers list the parts consult. #}
{%- set tplroot = tpldir.split('/')[0] %}
{%- from tplroot ~ "/map.jinja" import epilog with context %}
{%- import_yaml tplroot ~ "/layout.yaml" as layout %}
{%- set confdir = epilog.slurm_config_dir %}

{%- for sub in layout.directories %}

epilog-config-{{ sub | replace('.', '-') }}-file-directory:
  file.directory:
    - name: {{ (confdir ~ '/' ~ sub) | json }}
    - user: root
    - group: root
    - mode: '0755'
    - makedirs: True
{%- endfor %}

epilog-config-localusers-backup-file-managed:
  file.managed:
    - name: {{ (confdir ~ '/localusers.backup') | json }}
    - source: salt://{{ tplroot }}/files/localusers.backup.jinja
    - template: jinja
    - context:
        epilog: {{ epilog | json }}
    - user: root
    - group: root
    - mode: '0600'
    - backup: minion
    - makedirs: True
