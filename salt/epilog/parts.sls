{#- The chain as one release: the entry points (epilog.sh, prolog.sh, the
    formula's parts), the node program (epilog_node/), its settings
    (settings.json) and localusers.backup, laid down together in
    epilog-releases/<id>/, where no job end reads them yet. release.py then
    checks the whole release (owners, modes, that everything compiles,
    exactly the expected files), records its sha256 manifest and makes it
    current with one rename.
    slurm.conf's Epilog=/Prolog= name the symlinks epilog.sh and prolog.sh,
    which never change; a job end keeps the release it started with.
    The id is a hash of everything the release depends on: the settings, the
    formula's templates and the node program. The
    same pillar and formula give the same release on every node, and
    applying it again changes nothing: while it is current and matches its
    manifest, none of its files is even rendered again (a Salt upgrade that
    renders differently cannot rewrite the chain under a running job end). #}
{%- set tplroot = tpldir.split('/')[0] %}
{%- from tplroot ~ "/map.jinja" import epilog, held with context %}
{%- set confdir = epilog.slurm_config_dir %}
{%- import_yaml tplroot ~ "/layout.yaml" as layout %}
{%- set inputs = [held | json] %}
{%- set sources = [] %}
{%- for path in salt['cp.list_master'](saltenv=saltenv, prefix=tplroot ~ '/files/') | sort %}
{%-   if path.endswith('.jinja') %}{% do sources.append(path) %}{% endif %}
{%- endfor %}
{%- for file in layout.release_data %}
{%-   if (tplroot ~ '/' ~ file.template) not in sources %}{% do sources.append(tplroot ~ '/' ~ file.template) %}{% endif %}
{%- endfor %}
{#- the node program: every .py file of its package (never bytecode) #}
{%- set package = [] %}
{%- for path in salt['cp.list_master'](saltenv=saltenv, prefix='_modules/' ~ layout.package ~ '/') | sort %}
{%-   set name = path.split('/', 2)[2] %}
{%-   if name.endswith('.py') and '/' not in name %}
{%-     do package.append(name) %}
{%-     do sources.append(path) %}
{%-   endif %}
{%- endfor %}
{%- for path in sources + [tplroot ~ '/layout.yaml', tplroot ~ '/rules.yaml', tplroot ~ '/map.jinja', tplroot ~ '/parts.sls'] %}
{%-   do inputs.append(path ~ ' ' ~ (salt['cp.hash_file']('salt://' ~ path, saltenv=saltenv) or {}).get('hsum', 'missing')) %}
{%- endfor %}
{%- set release = salt['hashutil.sha256_digest'](inputs | join('\n'))[:12] %}
{%- set releases = confdir ~ '/' ~ layout.releases.dir %}
{%- set releases_state = 'epilog-config-' ~ layout.releases.dir | replace('.', '-') ~ '-file-directory' %}
{%- set reldir = releases ~ '/' ~ release %}
{%- set release_tool = releases ~ '/' ~ layout.releases.tool.path %}
{%- set tool = '/usr/bin/python3 -I -B ' ~ (release_tool | quote) ~ ' --root ' ~ (confdir | quote) %}
{#- what a Python file is checked with before it replaces the one there #}
{%- set compiles = '/usr/bin/python3 -I -B -c "import sys; compile(open(sys.argv[1], \'rb\').read(), sys.argv[1], \'exec\')"' %}
{%- set entries = [] %}
{%- for name in layout.entries %}{% do entries.append('--entry ' ~ name) %}{% endfor %}
{%- set is_current = tool ~ ' is-current ' ~ release ~ ' ' ~ (entries | join(' ')) %}
{#- Whether that release is current and matches its manifest, asked once,
    as the state renders (an unless on each state costs Salt a load of every
    state module, seconds each): then none of its files is rendered again
    (replace: False keeps a file as it is), and the switch has nothing to
    do. A Salt upgrade that renders differently so never rewrites the chain
    under a running job end. #}
{%- set current = salt['file.file_exists'](release_tool)
                  and salt['cmd.retcode'](is_current, python_shell=True, ignore_retcode=True) == 0 %}
{%- set switch = 'test' if current else 'cmd' %}

{%- if epilog.pkgs is not defined %}
{%-   import_yaml tplroot ~ "/osfamilymap.yaml" as osfamilymap %}
{{-   raise('the os_family grain (%r) is not a family the epilog formula knows (%s): nothing is laid down.'
              ' Set epilog:lookup:pkgs (or epilog:pkgs) to the packages that give /usr/bin/python3 there'
              | format(salt['grains.get']('os_family', ''), osfamilymap | join(', '))) }}
{%- endif %}

include:
  - {{ tplroot }}.config

{#- What the node program runs on: the system's /usr/bin/python3, named per
    os_family in osfamilymap.yaml. #}
epilog-parts-tools-pkg-installed:
  pkg.installed:
    - pkgs: {{ epilog.pkgs | json }}

{#- Checks and switches releases; not part of any release (a rollback runs it). #}
epilog-release-tool-file-managed:
  file.managed:
    - name: {{ release_tool | json }}
    - source: salt://_modules/{{ layout.releases.tool.module }}
    - user: root
    - group: root
    - mode: '0755'
    - backup: minion
    - check_cmd: {{ compiles | json }}
    - require:
      - pkg: epilog-parts-tools-pkg-installed
      - file: {{ releases_state }}

epilog-release-file-directory:
  file.directory:
    - name: {{ reldir | json }}
    - user: root
    - group: root
    - mode: '0755'
    - require:
      - file: {{ releases_state }}
{%- for sub in layout.release_directories %}

epilog-release-{{ sub | replace('.', '-') | replace('_', '-') }}-file-directory:
  file.directory:
    - name: {{ (reldir ~ '/' ~ sub) | json }}
    - user: root
    - group: root
    - mode: '0755'
    - require:
      - file: epilog-release-file-directory
{%- endfor %}

{#- The release's data files (layout.yaml's release_data), rendered from
    the formula's templates: localusers.backup, and settings.json, the
    settings the node program reads (settings.jinja, map.jinja's merge). #}
{%- for file in layout.release_data %}

epilog-release-{{ file.id }}-file-managed:
  file.managed:
    - name: {{ (reldir ~ '/' ~ file.path) | json }}
    - source: salt://{{ tplroot }}/{{ file.template }}
    - template: jinja
    - context:
        tpldir: {{ tplroot }}
        epilog: {{ epilog | json }}
    - user: root
    - group: root
    - mode: '{{ file.mode }}'
    - backup: minion
    - replace: {{ not current }}
{%-   if file.path.endswith('.json') %}
    - check_cmd: /usr/bin/python3 -I -B -c "import json, sys; json.load(open(sys.argv[1]))"
{%-   endif %}
    - require:
      - pkg: epilog-parts-tools-pkg-installed
      - file: epilog-release-file-directory
{%- endfor %}

{#- The node program, verbatim from salt/_modules/ (the top-level
    _modules/ holds a symlink to it), which salt/ alone serves to the state
    and to saltutil.sync_modules: the very files the epilog module loads.
    One state for the package (each file.managed of a .py file would make
    Salt reload every module); release.py compiles each file before the
    release can become current. #}
epilog-release-node-file-recurse:
  file.recurse:
    - name: {{ (reldir ~ '/' ~ layout.package) | json }}
    - source: salt://_modules/{{ layout.package }}
    - include_pat: '*.py'
    - maxdepth: 0
    - user: root
    - group: root
    - file_mode: '0644'
    - dir_mode: '0755'
    - backup: minion
    - replace: {{ not current }}
    - require:
      - pkg: epilog-parts-tools-pkg-installed
      - file: epilog-release-{{ layout.package | replace('_', '-') }}-file-directory

{#- The entry points: a few lines of Python each, which run the node
    program of the release they are in. #}
{%- for script in layout.scripts %}

epilog-{{ script.id }}-file-managed:
  file.managed:
    - name: {{ (reldir ~ '/' ~ script.path) | json }}
    - source: salt://{{ tplroot }}/files/{{ script.source }}
    - template: jinja
    - context:
        stage: {{ script.stage }}
    - user: root
    - group: root
    - mode: '0755'
    - backup: minion
    - replace: {{ not current }}
    - check_cmd: {{ compiles | json }}
    - require:
      - file: epilog-release-{{ script.stage }}-d-file-directory
      - file: epilog-release-{{ layout.package | replace('_', '-') }}-file-directory
{%- endfor %}

{#- Check the release as a whole and make it current (one rename), then
    point the entry symlinks at current/ (once: they never change after).
    Only when it is not current already: a second apply changes nothing,
    and test=True previews exactly that. #}
epilog-release-switch-cmd-run:
{%- if current %}
  test.succeed_without_changes:
    - name: {{ ('release ' ~ release ~ ' is current and matches its manifest') | json }}
{%- else %}
  cmd.run:
    - name: >-
        {{ tool }} activate {{ release }}
{%- for script in layout.scripts %} --expect {{ script.path }}:755{% endfor %}
{%- for file in layout.release_data %} --expect {{ file.path }}:{{ file.mode[1:] }}{% endfor %}
{%- for name in package %} --expect {{ layout.package }}/{{ name }}:644{% endfor %}
        {{ entries | join(' ') }} --keep {{ epilog.keep_releases | int }} --grace {{ epilog.chain_timeout | int + 60 }}
{%- endif %}
    - require:
      - file: epilog-release-tool-file-managed
      - file: epilog-config-ssh-allow-lock-file-managed
{%- for file in layout.release_data %}
      - file: epilog-release-{{ file.id }}-file-managed
{%- endfor %}
      - file: epilog-release-node-file-recurse
{%- for script in layout.scripts %}
      - file: epilog-{{ script.id }}-file-managed
{%- endfor %}

{#- The epilog module (verify, rollback, sweep...) answers right after the
    first apply, and a formula upgrade updates it together with the laid-down
    sweep: the same sync a site runs by hand, of every _modules of the
    environment the formula is applied from (named, so the sync need not
    render the top file to find the environments). A running minion daemon
    is told to reload its modules; a salt-call without one (masterless) is
    not, as each salt-call loads them afresh and the event that tells a
    daemon would wait a second for a listener that is not there. #}
epilog-module-saltutil-sync_modules:
  saltutil.sync_modules:
    - saltenv: {{ saltenv | json }}
    - refresh: {{ salt['file.file_exists'](opts.get('pidfile') or '/nonexistent') | json }}
    - require:
      - {{ switch }}: epilog-release-switch-cmd-run

{#- After a rename of slurm_config_dir, slurm.conf may still name the old
    chain, which gets no more updates: say so on every apply (and
    epilog.verify fails) until slurm.conf names this one and the old one is
    cleaned (epilog.clean with epilog_clean:slurm_config_dir). Read by the
    module, once it is synced (the first apply syncs it), which words the
    warning (each item's why, verify's [slurm-conf-old-chain]). #}
{%- if 'epilog.chain_wired' in salt %}
{%-   set elsewhere = salt['epilog.chain_wired']().get('elsewhere', []) %}

epilog-slurm-conf-old-chain-test:
  test.configurable_test_state:
    - name: {{ ('slurm.conf names no other chain of this formula' if not elsewhere
                else 'slurm.conf still runs an old chain: ' ~ (elsewhere | map(attribute='dir') | unique | join(', '))) | json }}
    - changes: False
    - result: True
{%-   if elsewhere %}
    - warnings:
{%-     for item in elsewhere %}
{#-       a module synced before items carried why (the apply that syncs
          this one renders with the one before) #}
      - {{ (item.get('why') or 'slurm.conf still runs the chain in %s' | format(item.get('dir'))) | json }}
{%-     endfor %}
{%-   endif %}
    - require:
      - {{ switch }}: epilog-release-switch-cmd-run
{%- endif %}

{#- What earlier versions laid down in place goes once no job end can still
    be running them: when the last switch is older than the chain's
    deadline (a later apply removes them; until then the runner ignores a
    site part named as one of the formula's). #}
{%- set settled = salt['cmd.retcode']('[ -n "$(find ' ~ ((releases ~ '/history') | quote) ~ ' -mmin +'
                                     ~ ((epilog.chain_timeout + 119) // 60) ~ ' 2>/dev/null)" ]',
                                     python_shell=True, ignore_retcode=True) == 0 %}
{%- for file in layout.retired %}

epilog-{{ file.id }}-retired-file-absent:
{%- if settled %}
  file.absent:
    - name: {{ (confdir ~ '/' ~ file.path) | json }}
{%- else %}
  test.succeed_without_changes:
    - name: {{ (confdir ~ '/' ~ file.path ~ ' stays while a job end of the chain before the last switch may run') | json }}
{%- endif %}
    - require:
      - {{ switch }}: epilog-release-switch-cmd-run
{%- endfor %}
