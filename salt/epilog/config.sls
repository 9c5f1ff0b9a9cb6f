{#- The site's part directories, the releases directory, the log directory
    and the lock of the ssh allow file: what lives outside the releases. #}
{%- set tplroot = tpldir.split('/')[0] %}
{%- from tplroot ~ "/map.jinja" import epilog with context %}
{%- import_yaml tplroot ~ "/layout.yaml" as layout %}
{%- set confdir = epilog.slurm_config_dir %}

{#- The epilog runs as root, and the node program writes the log, the
    records, the metrics and the ssh allow file only inside a directory only
    root can write (system.Trust.root_only; elsewhere it writes none of
    them): root's, not a symlink, and writable by no group and no other
    user, and whose existing ancestors are root's real directories that
    nobody else can write either, or sticky (nobody else can then swap root's
    entry in them). Anything else fails the render, naming the entry; a
    missing directory is created root:root 0755. (Debian's /var/log/slurm
    belongs to the slurm user, who could swap epilog.log for a symlink to
    /etc/nologin.) The rule is system.Trust's, judged here at the render
    from each entry's lstat, in Jinja as strict.jinja's checks are (a node's
    first apply has no module of ours to call: the state syncs it later in
    the same apply); tests/unit/test_config_root_only.py holds it to
    Trust.root_dir over a grid of what lstat finds. #}
{%- for key in ['log_file', 'record_file', 'ssh_allow_file'] + (['metrics_file'] if epilog.metrics_file else []) %}
{%-   set parts = epilog[key].strip('/').split('/')[:-1] %}
{%-   for i in range(parts | length + 1) %}
{%-     set path = '/' ~ (parts[:i] | join('/')) %}
{%-     set st = salt['file.lstat'](path) %}
{%-     set writable = (st.st_mode // 16) % 2 or (st.st_mode // 2) % 2 if st else False %}
{%-     set sticky = (st.st_mode // 512) % 2 if st else False %}
{%-     if st and (st.st_mode // 4096 != 4 or st.st_uid != 0 or (writable and (loop.last or not sticky))) %}
{{-       raise('epilog:%s (%r): %s is a symlink, not owned by root, or writable by its group or others (uid %d, mode %o);'
                ' the epilog runs as root and writes only where no other account can plant a symlink:'
                ' choose a directory only root can write, e.g. /var/log/slurm-epilog'
                | format(key, epilog[key], path, st.st_uid, st.st_mode)) }}
{%-     endif %}
{%-   endfor %}
{%- endfor %}

{%- for sub in layout.directories + [layout.releases.dir] %}

epilog-config-{{ sub | replace('.', '-') }}-file-directory:
  file.directory:
    - name: {{ (confdir ~ '/' ~ sub) | json }}
    - user: root
    - group: root
    - mode: '0755'
    - makedirs: True
{%- endfor %}

{#- The directories of the log, the decision records and the metrics
    textfile: one state for each directory (they are often the same). #}
{%- set made = [] %}
{%- for key in ['log_file', 'record_file', 'metrics_file'] if epilog[key] %}
{%-   set dir = epilog[key].rsplit('/', 1)[0] or '/' %}
{%-   if dir not in made %}
{%-     do made.append(dir) %}

epilog-config-{{ key.split('_')[0] }}-directory-file-directory:
  file.directory:
    - name: {{ dir | json }}
    - user: root
    - group: root
    - mode: '0755'
    - makedirs: True
{%-   endif %}
{%- endfor %}

{#- Serialises the parts' edits of the ssh allow file. Root-only (0600): no
    other account can open it, so none can hold the lock and stall a prolog. #}
epilog-config-ssh-allow-lock-file-managed:
  file.managed:
    - name: {{ (confdir ~ '/' ~ (layout.data | selectattr('id', 'equalto', 'config-ssh-allow-lock') | first).path) | json }}
    - contents: ''
    - replace: False
    - user: root
    - group: root
    - mode: '0600'
    - makedirs: True
