{#- Between jobs: the minion's scheduler runs the residue sweep and the
    strays look every epilog:schedule:interval seconds, put off by up to
    splay seconds each time, as Salt schedule entries of their own
    (schedule.present: kept in the minion's minion.d/_schedule.conf, so they
    outlive a restart). kill_strays makes the strays run kill. Each run is a
    record of its own (source: schedule) that epilog.report counts, and
    neither acts for a user whose job end or prolog holds their lock.
    interval 0 (the default) removes the formula's entries, and touches no
    other.
    A running salt-minion of this configuration takes the entries over its
    event bus: in its scheduler at once, and kept in _schedule.conf. With
    none running, they are written to _schedule.conf itself (Salt's offline
    mode), where the minion reads them when it starts; their removal
    likewise. minion.jinja says which.
      salt 'slurm-work-*' state.apply epilog.schedule test=True #}
{%- set tplroot = tpldir.split('/')[0] %}
{%- from tplroot ~ "/map.jinja" import epilog with context %}
{%- set schedule = epilog.schedule %}
{%- from tplroot ~ "/minion.jinja" import minion with context %}
{%- set running = minion.running %}
{%- set where = minion.where %}
{%- set sweep_entry = {'function': 'epilog.sweep', 'job_kwargs': {}} %}
{%- set strays_entry = {'function': 'epilog.strays', 'job_kwargs': {'kill': schedule.kill_strays} } %}
{%- set entries = {'epilog-sweep': sweep_entry, 'epilog-strays': strays_entry} %}
{%- if schedule.interval %}
{%-   for name, entry in entries | dictsort %}

epilog-schedule-{{ name }}-present:
  schedule.present:
    - name: {{ name | json }}
    - function: {{ entry.function | json }}
    - job_kwargs: {{ entry.job_kwargs | json }}
    - seconds: {{ schedule.interval | int }}
    - splay: {{ schedule.splay | int }}
    - maxrunning: 1
    - return_job: False
    - offline: {{ not running }}
{%-   endfor %}

epilog-schedule-where-test-nop:
  test.nop:
    - name: {{ ("where the formula's schedule entries go: " ~ where) | json }}
{%- else %}
{#-   what the removal acts on: the running minion's scheduler, or the file #}
{%-   if running %}
{%-     set held = opts.get('schedule') or {} %}
{%-   else %}
{%-     set held = salt['schedule.list'](show_all=True, return_yaml=False, offline=True) %}
{%-   endif %}
{%-   for name in entries | sort if name in held %}

epilog-schedule-{{ name }}-absent:
  schedule.absent:
    - name: {{ name | json }}
    - offline: {{ not running }}
{%-     if loop.last %}

epilog-schedule-where-test-nop:
  test.nop:
    - name: {{ ("where the formula's schedule entries are taken out: " ~ where) | json }}
{%-     endif %}
{%-   else %}

epilog-schedule-test-nop:
  test.nop:
    - name: epilog:schedule:interval is 0 and the minion holds none of the formula's schedule entries
{%-   endfor %}
{%- endif %}
