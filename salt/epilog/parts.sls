{#- The chain as one release: the runners (epilog.sh, prolog.sh), the
    formula's parts, localusers.backup and the sweep, laid down together in
    epilog-releases/<id>/, where no job end reads them yet. release.py then
    checks the whole release (owners, modes, bash -n, exactly the expected
    files), records its sha256 manifest and makes it current with one rename.
    slurm.conf's Epilog=/Prolog= name the symlinks epilog.sh and prolog.sh,
    which never change; a job end keeps the release it started with.
    The id is a hash of everything the render depends on: the settings and
    the formula's templates (not release.py, which is not in a release). The
    same pillar and formula give the same release on every node, and
    applying it again changes nothing: while it is current and matches its
    manifest, none of its files is even rendered again (a Salt upgrade that
    renders differently cannot rewrite the chain under a running job end). #}
{%- set tplroot = tpldir.split('/')[0] %}
{%- from tplroot ~ "/map.jinja" import epilog with context %}
{%- set confdir = epilog.slurm_config_dir %}
{%- import_yaml tplroot ~ "/layout.yaml" as layout %}
{#- the settings the release holds: not the package names, which differ per
    os_family and are in no file of it #}
{%- set held = {} %}
{%- for key, value in epilog.items() if key != 'pkgs' %}{% do held.update({key: value}) %}{% endfor %}
{%- set inputs = [held | json] %}
{%- set sources = [] %}
{%- for path in salt['cp.list_master'](saltenv=saltenv, prefix=tplroot ~ '/files/') | sort %}
{%-   if path.endswith('.jinja') %}{% do sources.append(path) %}{% endif %}
{%- endfor %}
{%- for file in layout.release_data %}
{%-   set path = '_modules/' ~ file.module if file.module is defined else tplroot ~ '/files/' ~ file.source %}
{%-   if path not in sources %}{% do sources.append(path) %}{% endif %}
{%- endfor %}
{%- for path in sources + [tplroot ~ '/layout.yaml', tplroot ~ '/rules.yaml', tplroot ~ '/parts.sls'] %}
{%-   do inputs.append(path ~ ' ' ~ (salt['cp.hash_file']('salt://' ~ path, saltenv=saltenv) or {}).get('hsum', 'missing')) %}
{%- endfor %}
{%- set release = salt['hashutil.sha256_digest'](inputs | join('\n'))[:12] %}
{%- set releases = confdir ~ '/' ~ layout.releases.dir %}
{%- set releases_state = 'epilog-config-' ~ layout.releases.dir | replace('.', '-') ~ '-file-directory' %}
{%- set reldir = releases ~ '/' ~ release %}
{%- set release_tool = releases ~ '/' ~ layout.releases.tool.path %}
{%- set tool = '/usr/bin/python3 -I -B ' ~ (release_tool | quote) ~ ' --root ' ~ (confdir | quote) %}
{%- set entries = [] %}
{%- for name in layout.entries %}{% do entries.append('--entry ' ~ name) %}{% endfor %}
{%- set is_current = tool ~ ' is-current ' ~ release ~ ' ' ~ (entries | join(' ')) %}

{%- if epilog.pkgs is not defined %}
{%-   import_yaml tplroot ~ "/osfamilymap.yaml" as osfamilymap %}
{{-   raise('the os_family grain (%r) is not a family the epilog formula knows (%s): nothing is laid down.'
              ' Set epilog:lookup:pkgs (or epilog:pkgs) to the packages that give python3, pgrep and perl there'
              | format(salt['grains.get']('os_family', ''), osfamilymap | join(', '))) }}
{%- endif %}

include:
  - {{ tplroot }}.config

{#- What the parts run: python3 (part 45's sweep, release.py), pgrep, perl
    (part 40's sender): named per os_family in osfamilymap.yaml. #}
epilog-parts-tools-pkg-installed:
  pkg.installed:
    - pkgs: {{ epilog.pkgs | json }}

{#- Checks and switches releases; not part of any release (a rollback runs it). #}
epilog-release-tool-file-managed:
  file.managed:
    - name: {{ release_tool | json }}
    - source: salt://{{ tplroot }}/files/{{ layout.releases.tool.source }}
    - user: root
    - group: root
    - mode: '0755'
    - backup: minion
    - check_cmd: /usr/bin/python3 -I -B -c "import sys; compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')"
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

epilog-release-{{ sub | replace('.', '-') }}-file-directory:
  file.directory:
    - name: {{ (reldir ~ '/' ~ sub) | json }}
    - user: root
    - group: root
    - mode: '0755'
    - require:
      - file: epilog-release-file-directory
{%- endfor %}

{#- The release's other files (layout.yaml's release_data): the sweep
    comes verbatim from salt/_modules/ (the top-level _modules/ holds
    symlinks to it), which salt/ alone serves to the state and to
    saltutil.sync_modules; the others are rendered from files/. #}
{%- for file in layout.release_data %}

epilog-release-{{ file.id }}-file-managed:
  file.managed:
    - name: {{ (reldir ~ '/' ~ file.path) | json }}
{%-   if file.module is defined %}
    - source: salt://_modules/{{ file.module }}
{%-   else %}
    - source: salt://{{ tplroot }}/files/{{ file.source }}
    - template: jinja
    - context:
        epilog: {{ epilog | json }}
{%-   endif %}
    - user: root
    - group: root
    - mode: '{{ file.mode }}'
    - backup: minion
    - unless: {{ is_current | json }}
{%-   if file.path.endswith('.py') %}
    - check_cmd: /usr/bin/python3 -I -B -c "import sys; compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')"
{%-   endif %}
    - require:
      - pkg: epilog-parts-tools-pkg-installed
      - file: epilog-release-file-directory
{%- endfor %}

{%- for script in layout.scripts %}
{%-   set own_parts = [] %}
{%-   for other in layout.scripts if other.path.startswith(script.stage ~ '.d/') %}
{%-     do own_parts.append(other.path.split('/')[-1]) %}
{%-   endfor %}
{%-   set retired_parts = [] %}
{%-   for other in layout.retired if other.path.startswith(script.stage ~ '.d/') %}
{%-     do retired_parts.append(other.path.split('/')[-1]) %}
{%-   endfor %}

epilog-{{ script.id }}-file-managed:
  file.managed:
    - name: {{ (reldir ~ '/' ~ script.path) | json }}
    - source: salt://{{ tplroot }}/files/{{ script.source }}
    - template: jinja
    - context:
        epilog: {{ epilog | json }}
        stage: {{ script.stage }}
        own_parts: {{ own_parts | json }}
        retired_parts: {{ retired_parts | json }}
        release: {{ release }}
    - user: root
    - group: root
    - mode: '0755'
    - backup: minion
    - unless: {{ is_current | json }}
    - check_cmd: /bin/bash -n
    - require:
      - file: epilog-release-{{ script.stage }}-d-file-directory
{%- endfor %}

{#- Check the release as a whole and make it current (one rename), then
    point the entry symlinks at current/ (once: they never change after).
    Only when it is not current already: a second apply changes nothing,
    and test=True previews exactly that. #}
epilog-release-switch-cmd-run:
  cmd.run:
    - name: >-
        {{ tool }} activate {{ release }}
{%- for script in layout.scripts %} --expect {{ script.path }}:755{% endfor %}
{%- for file in layout.release_data %} --expect {{ file.path }}:{{ file.mode[1:] }}{% endfor %}
        {{ entries | join(' ') }} --keep {{ epilog.keep_releases | int }} --grace {{ epilog.chain_timeout | int + 60 }}
    - unless: {{ is_current | json }}
    - require:
      - file: epilog-release-tool-file-managed
      - file: epilog-config-ssh-allow-lock-file-managed
{%- for file in layout.release_data %}
      - file: epilog-release-{{ file.id }}-file-managed
{%- endfor %}
{%- for script in layout.scripts %}
      - file: epilog-{{ script.id }}-file-managed
{%- endfor %}

{#- The epilog module (verify, rollback, sweep...) answers right after the
    first apply, and a formula upgrade updates it together with the laid-down
    sweep: the same sync a site runs by hand (it syncs every _modules of
    the environment, as saltutil.sync_modules does). #}
epilog-module-saltutil-sync_modules:
  saltutil.sync_modules:
    - refresh: True
    - require:
      - cmd: epilog-release-switch-cmd-run

{#- After a rename of slurm_config_dir, slurm.conf may still name the old
    chain, which gets no more updates: say so on every apply (and
    epilog.verify fails) until slurm.conf names this one and the old one is
    cleaned (epilog.clean with epilog_clean:slurm_config_dir). Read by the
    module, once it is synced (the first apply syncs it). #}
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
      - {{ ('%s has %s=%s/%s.sh: slurmd runs the chain in %s, not this one in %s, and it no longer gets the pillar\'s updates.'
            ' Point %s= at %s/%s.sh, run scontrol reconfigure, then state.apply epilog.clean'
            ' pillar=\'{"epilog_clean": {"slurm_config_dir": "%s"} }\''
            | format(item.conf, item.key, item.dir, item.key | lower, item.dir, confdir, item.key, confdir, item.key | lower, item.dir))
           | json }}
{%-     endfor %}
{%-   endif %}
    - require:
      - cmd: epilog-release-switch-cmd-run
{%- endif %}

{#- What earlier versions laid down in place goes once no job end can still
    be running them: when the last switch is older than the chain's
    deadline (a later apply removes them; until then the runner ignores a
    site part named as one of the formula's). #}
{%- set settled = '[ -n "$(find ' ~ ((releases ~ '/history') | quote) ~ ' -mmin +' ~ ((epilog.chain_timeout + 119) // 60) ~ ' 2>/dev/null)" ]' %}
{%- for file in layout.retired %}

epilog-{{ file.id }}-retired-file-absent:
  file.absent:
    - name: {{ (confdir ~ '/' ~ file.path) | json }}
    - onlyif: {{ settled | json }}
    - require:
      - cmd: epilog-release-switch-cmd-run
{%- endfor %}
