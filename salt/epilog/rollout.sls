{#- A staged rollout of the epilog chain, as the SOP asks: a canary node
    first, then the rest in batches, each node gated by epilog.verify, and
    a failed batch switched back to the release it ran before. Run on the
    master:

      salt-run state.orchestrate epilog.rollout pillar='{"epilog_rollout": {"target": "slurm-work-*"}}' test=True  # noqa: 206
      salt-run state.orchestrate epilog.rollout pillar='{"epilog_rollout": {"target": "slurm-work-*", "batch": "25%"}}'  # noqa: 206

    epilog_rollout (pillar or CLI; the defaults are defaults.yaml's):
      target    the minions (required)
      tgt_type  glob (default), list, pcre, grain, compound, nodegroup, ...
      batch     nodes per batch after the canary: a whole number, or 'N%' of
                the responding nodes after the canary, at least one
                (default '10%')
      canary    the first node, alone (default: the first responding minion)
      name      the checkpoint name (default rollout-<time>-<random>): give
                the same name to run a stopped rollout again, and a rollback
                still returns each node to what it ran before the first try

    For every batch, in order, each step requiring the one before:
      saltutil.sync_modules and saltutil.refresh_pillar (the formula's
      module and the node's current pillar), epilog.checkpoint NAME (the
      release current now), state.apply epilog, epilog.verify. On a failure
      of the apply or the verify, epilog.rollback checkpoint=NAME switches
      that batch back to exactly its checkpoint (nothing, where the apply
      never switched), and no later batch starts: they stay on their old
      release. A node that does not answer when its batch comes (it answered
      when the plan was made) fails that batch's first step, named in its
      comment, and stops the rollout there. test=True previews it all: every
      node's state.apply test=True and the batches, without the checkpoints'
      or rollbacks' effects.

    As each batch ends, an event on the master's bus says so: tag
    epilog/rollout/<name>/batch-<i>, data {rollout, batch, batches, nodes,
    result: verified or failed, next}; each node's verify answer (result,
    release, problems, warnings) comes just before it, as its job return
    (salt/job/<jid>/ret/<node>). salt-run state.orchestrate prints nothing
    until the whole run returns; watch them from another shell:
      salt-run state.event 'epilog/rollout/*' pretty=True #}
{%- set tplroot = tpldir.split('/')[0] %}
{%- import_yaml tplroot ~ "/defaults.yaml" as defaults %}
{%- from tplroot ~ "/strict.jinja" import refuse_unknown %}
{#- epilog_rollout's keys are defaults.yaml's epilog_rollout: any other is
    refused, naming the nearest (a batch size under `bacth` must not pass
    for the default) #}
{%- set given = salt['pillar.get']('epilog_rollout', {}) %}
{{- refuse_unknown('epilog_rollout:', given, defaults.epilog_rollout, 'epilog.rollout') }}
{%- set rollout = salt['slsutil.merge'](defaults.epilog_rollout, given or {}) %}
{%- set target = rollout.target %}
{%- if target is not string or target | trim == '' %}
{{-   raise('epilog_rollout:target (%r) is required: the minions to roll out to, e.g. slurm-work-*' | format(target)) }}
{%- endif %}
{%- set tgt_type = rollout.tgt_type %}
{%- if tgt_type not in ['glob', 'pcre', 'list', 'grain', 'grain_pcre', 'pillar', 'pillar_pcre', 'nodegroup', 'range', 'compound', 'ipcidr'] %}
{{-   raise('epilog_rollout:tgt_type (%r) is not a Salt target type (glob, pcre, list, grain, compound, nodegroup, ...)' | format(tgt_type)) }}
{%- endif %}
{%- set batch = rollout.batch %}
{%- set percent = batch is string and batch | regex_match('([1-9][0-9]?|100)%') %}
{%- if not percent and (batch is not integer or batch is sameas true or batch is sameas false or batch < 1) %}
{{-   raise('epilog_rollout:batch (%r) must be a whole number of nodes (1 or more) or a percentage such as 25%%' | format(batch)) }}
{%- endif %}
{%- set name = rollout.name or 'rollout-' ~ salt['status.time']('%Y%m%dT%H%M%S') ~ '-' ~ salt['test.random_hash'](size=6)[:6] %}
{%- if name is not string or not name | regex_match('([A-Za-z][A-Za-z0-9._-]{0,63})\\Z') %}
{{-   raise('epilog_rollout:name (%r) must be a letter, then up to 63 letters, digits and . _ -' | format(name)) }}
{%- endif %}

{%- set status = salt['saltutil.runner']('manage.status', tgt=target, tgt_type=tgt_type, output=False) %}
{%- set up = (status.get('up') or []) | sort if status is mapping else [] %}
{%- set down = (status.get('down') or []) | sort if status is mapping else [] %}
{%- if not up %}
{{-   raise('epilog_rollout:target %r (%s) matches no responding minion (down: %s)' | format(target, tgt_type, down | join(', ') or 'none')) }}
{%- endif %}
{%- set canary = up[0] if rollout.canary is none else rollout.canary %}
{%- if canary not in up %}
{{-   raise('epilog_rollout:canary (%r) is not a responding minion of the target (%s)' | format(canary, up | join(', '))) }}
{%- endif %}
{%- set rest = up | reject('equalto', canary) | list %}
{%- if percent %}
{%-   set size = [1, (rest | length * (batch[:-1] | int) + 99) // 100] | max %}
{%- else %}
{%-   set size = batch %}
{%- endif %}
{%- set batches = [[canary]] %}
{%- for i in range(0, rest | length, size) %}
{%-   do batches.append(rest[i:i + size]) %}
{%- endfor %}

epilog-rollout-plan:
  test.show_notification:
    - text: {{ ('rollout %s of the epilog chain: canary %s, then %d batch(es) of up to %d: %s (batch: %s)%s; '
                 'each batch, as it ends, fires the event epilog/rollout/%s/batch-<i>'
                | format(name, canary, batches | length - 1, size, batches[1:] | map('join', ',') | join(' | ') or 'none',
                         batch, '; not responding, left out: ' ~ (down | join(', ')) if down else '', name)) | json }}

{%- for nodes in batches %}
{%-   set i = loop.index0 %}
{%-   set step = 'epilog-rollout-' ~ i ~ '-' %}
{%-   for fun, kwarg in [('saltutil.sync_modules', {}), ('saltutil.refresh_pillar', {'wait': True})] %}

{{ step }}{{ fun }}:
  salt.function:
    - name: {{ fun }}
    - tgt: {{ nodes | json }}
    - tgt_type: list
    - expect_minions: True
{%-     if kwarg %}
    - kwarg: {{ kwarg | json }}
{%-     endif %}
    - require:
{%-     if loop.first %}
      - test: epilog-rollout-plan
{%-       if i > 0 %}
      - salt: epilog-rollout-{{ i - 1 }}-verify
{%-       endif %}
{%-     else %}
      - salt: {{ step }}saltutil.sync_modules
{%-     endif %}
{%-   endfor %}

{{ step }}checkpoint:
  salt.function:
    - name: epilog.checkpoint
    - tgt: {{ nodes | json }}
    - tgt_type: list
    - expect_minions: True
    - arg:
      - {{ name | json }}
    - require:
      - salt: {{ step }}saltutil.refresh_pillar

{{ step }}apply:
  salt.state:
    - tgt: {{ nodes | json }}
    - tgt_type: list
    - sls: epilog
    - expect_minions: True
    - require:
      - salt: {{ step }}checkpoint

{{ step }}verify:
  salt.function:
    - name: epilog.verify
    - tgt: {{ nodes | json }}
    - tgt_type: list
    - expect_minions: True
    - require:
      - salt: {{ step }}apply

{#- As the batch ends, an event on the master's bus says so (salt-run
    state.orchestrate prints nothing until the whole run returns): verified,
    or failed (at any step; the batch before it verified). #}
{%-   for outcome in ['verified', 'failed'] %}

{{ step }}{{ outcome }}-event:
  salt.runner:
    - name: event.send
    - tag: epilog/rollout/{{ name }}/batch-{{ i }}
    - data: {{ {'rollout': name, 'batch': i, 'batches': batches | length, 'nodes': nodes, 'result': outcome,
                'next': batches[i + 1] if i + 1 < batches | length else []} | json }}
    - require:
{%-     if outcome == 'verified' %}
      - salt: {{ step }}verify
{%-     elif i > 0 %}
      - salt: epilog-rollout-{{ i - 1 }}-verify
{%-     else %}
      - test: epilog-rollout-plan
{%-     endif %}
{%-     if outcome == 'failed' %}
    - onfail:
{%-       for failing in ['saltutil.sync_modules', 'saltutil.refresh_pillar', 'checkpoint', 'apply', 'verify'] %}
      - salt: {{ step }}{{ failing }}
{%-       endfor %}
{%-     endif %}
{%-   endfor %}
{%-   if not opts.get('test') %}

{#- onfail: after a failed apply or verify; it requires the checkpoint, so a
    batch that never started (an earlier one failed) is not touched. #}
{{ step }}rollback:
  salt.function:
    - name: epilog.rollback
    - tgt: {{ nodes | json }}
    - tgt_type: list
    - expect_minions: True
    - kwarg:
        checkpoint: {{ name | json }}
    - require:
      - salt: {{ step }}checkpoint
    - onfail:
      - salt: {{ step }}apply
      - salt: {{ step }}verify
{%-   endif %}
{%- endfor %}
