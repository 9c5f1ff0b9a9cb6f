{#- Removes everything the formula laid down, in reverse order, and nothing
    else: the minion's schedule entries epilog-sweep and epilog-strays (of
    the formula's functions), the formula's account lines in
    /etc/pam.d/sshd (between its BEGIN and END markers, the file backed up)
    and then the operators' list epilog.pam laid down (moved to the
    minion's file_backup), the entry symlinks (epilog.sh, prolog.sh,
    localusers.backup), every release in epilog-releases/ with release.py,
    ssh_allow.lock, then epilog.d/ and prolog.d/ only if they are empty (a
    site's own parts stay). It leaves slurm_config_dir, the ssh allow file,
    the log and its directory, and the packages.
    It refuses, removing nothing, while slurm.conf still names the runners.
      salt 'slurm-work-*' state.apply epilog.clean test=True
    After a rename of slurm_config_dir, the old directory is given as
    epilog_clean:slurm_config_dir (the pillar's is the default):
      salt 'slurm-work-*' state.apply epilog.clean pillar='{"epilog_clean": {"slurm_config_dir": "/etc/slurm-old"}}'  # noqa: 206 #}
{%- set tplroot = tpldir.split('/')[0] %}
{#- the operators are not needed to remove the chain: clean works on a
    minion whose epilog pillar is gone (map.jinja checks the rest) #}
{%- set operators_optional = true %}
{%- from tplroot ~ "/map.jinja" import epilog, path_pattern, dots_pattern with context %}
{%- import_yaml tplroot ~ "/layout.yaml" as layout %}
{%- import_yaml tplroot ~ "/defaults.yaml" as defaults %}
{%- from tplroot ~ "/strict.jinja" import refuse_unknown %}
{#- epilog_clean's keys are defaults.yaml's epilog_clean: any other is
    refused, naming the nearest (a misspelt slurm_config_dir must not pass
    for the pillar's own directory) #}
{%- set given = salt['pillar.get']('epilog_clean', {}) %}
{{- refuse_unknown('epilog_clean:', given, defaults.epilog_clean, 'epilog.clean') }}
{%- set clean = salt['slsutil.merge'](defaults.epilog_clean, given or {}) %}
{%- set confdir = epilog.slurm_config_dir if clean.slurm_config_dir is none else clean.slurm_config_dir %}
{%- if confdir is not string or not confdir | regex_match(path_pattern) or confdir | regex_search(dots_pattern) %}
{{-   raise('epilog_clean:slurm_config_dir (%r) must be an absolute path of letters, digits and . _ + @ - without . or .. components' | format(confdir)) }}
{%- elif layout.releases.dir in confdir.split('/') %}
{{-   raise('epilog_clean:slurm_config_dir (%r) is inside a chain\'s %s: give the directory that holds %s'
              | format(confdir, layout.releases.dir, layout.releases.dir)) }}
{%- endif %}
{%- set confdir = confdir.rstrip('/') or '/' %}

{#- Removing epilog.sh while a slurm.conf still names it would drain the
    node at its next job end: refuse until no slurm.conf of this node names
    anything under slurm_config_dir in Epilog= or Prolog=, read as Slurm
    reads it (epilog.chain_wired: Include, quotes, any case, $SLURM_CONF,
    slurmd's own, the configless cache), and refuse as well when that cannot
    be established (no slurm.conf, an unreadable one or Include). #}
{%- set wired = salt['epilog.chain_wired'](confdir) %}
{%- set refusal = wired.wired + wired.unknown %}

epilog-clean-slurm-conf-no-longer-wired-test:
{%- if refusal %}
  test.fail_without_changes:
    - name: {{ ('refusing to remove the chain: ' ~ (refusal | join('; ')) ~ '. Remove Epilog=/Prolog= from slurm.conf'
               ' and run scontrol reconfigure first, or slurmd drains the node at its next job end') | json }}
{%- else %}
  test.succeed_without_changes:
    - name: {{ ('no slurm.conf names the chain (read: ' ~ (wired.read | join(', ')) ~ ')') | json }}
{%- endif %}

{#- In reverse order of init.sls: the schedule first (its runs need the
    chain), then sshd's lines, then the list they name (its operators are
    let in by those lines while they are there). Each after the check
    above: a clean that refuses removes nothing. The schedule entries go
    from the running minion's scheduler, or, with no salt-minion daemon
    running (masterless), from the file it reads when it starts. #}
{%- from tplroot ~ "/minion.jinja" import minion with context %}
{%- set schedule = salt['epilog.schedule_held']() %}
{%- for name in schedule.entries %}

epilog-clean-schedule-{{ name }}-absent:
  schedule.absent:
    - name: {{ name | json }}
{%-   if not minion.running %}
    - offline: True
{%-   endif %}
    - require:
      - test: epilog-clean-slurm-conf-no-longer-wired-test
{%- endfor %}

{#- epilog.pam_clean judges both before anything is written: a block of the
    formula's edited by hand fails the render; a list that is not the
    formula's, or that other PAM lines name, stays. #}
{%- set pam = salt['epilog.pam_clean']() %}
{%- if pam.sshd is not none %}

epilog-clean-pam-sshd-file-managed:
  file.managed:
    - name: /etc/pam.d/sshd
    - contents: {{ pam.sshd | json }}
    - follow_symlinks: False
    - backup: minion
    - require:
      - test: epilog-clean-slurm-conf-no-longer-wired-test
{%- endif %}
{%- for item in pam.operators_files %}

epilog-clean-pam-operators-file-{{ loop.index }}-moved-to-backup:
  file.rename:
    - name: {{ item.backup | json }}
    - source: {{ item.path | json }}
    - makedirs: True
    - require:
      - test: epilog-clean-slurm-conf-no-longer-wired-test
{%-   if pam.sshd is not none %}
      - file: epilog-clean-pam-sshd-file-managed
{%-   endif %}
{%- endfor %}
{%- for why in pam.kept %}

epilog-clean-pam-list-{{ loop.index }}-kept-test:
  test.succeed_without_changes:
    - name: {{ why | json }}
{%- endfor %}

{%- set removed = [] %}
{%- for name in layout.entries | reverse %}
{%-   do removed.append({'id': 'entry-' ~ name | replace('.', '-'), 'path': name}) %}
{%- endfor %}
{%- do removed.append({'id': 'releases', 'path': layout.releases.dir}) %}
{%- for file in (layout.data | reverse | list) + layout.retired %}
{%-   do removed.append(file) %}
{%- endfor %}

{#- The entry symlinks first (slurm.conf no longer names them), then every
    release with the tool and the history: nothing of the formula's is left
    to roll back to. #}
{%- for file in removed %}

epilog-clean-{{ file.id }}-file-absent:
  file.absent:
    - name: {{ (confdir ~ '/' ~ file.path) | json }}
    - require:
      - test: epilog-clean-slurm-conf-no-longer-wired-test
{%- endfor %}

{%- for sub in layout.directories | reverse %}
{%-   set dir = confdir ~ '/' ~ sub %}

epilog-clean-{{ sub | replace('.', '-') }}-empty-directory-absent:
  cmd.run:
    - name: rmdir -- {{ dir | quote }}
    - onlyif: test -d {{ dir | quote }} && test ! -L {{ dir | quote }} && test -z "$(ls -A -- {{ dir | quote }})"
    - require:
{%-   for file in removed %}
      - file: epilog-clean-{{ file.id }}-file-absent
{%-   endfor %}
{%- endfor %}
