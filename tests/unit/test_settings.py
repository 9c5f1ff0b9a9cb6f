"""The settings' one merge and one set of rules (map.jinja with rules.yaml),
rendered through Salt's own Jinja environment with the pillar and the grains
given as plain data: the rules a bad pillar meets, the message naming its
entry, and what a good one merges to. No root and no Salt loader: this is
what the states and the epilog module (settings.jinja) both read."""
import copy
import json
import re

import pytest
import yaml

from tests.helpers import LAYOUT, REPO, load_file
from tests.release import UNHELD

salt_templates = pytest.importorskip("salt.utils.templates")
dictupdate = pytest.importorskip("salt.utils.dictupdate")
import salt.config  # noqa: E402 - after importorskip, as salt may be missing
import salt.exceptions  # noqa: E402

RULES = yaml.safe_load((REPO / "salt/epilog/rules.yaml").read_text())
DEFAULTS = yaml.safe_load((REPO / "salt/epilog/defaults.yaml").read_text())["epilog"]
OSFAMILYMAP = yaml.safe_load((REPO / "salt/epilog/osfamilymap.yaml").read_text())


# What the formula has no default for: the least pillar a node can have.
MINIMAL = {"localusers": ["root"]}


def minimal(pillar):
    """PILLAR with MINIMAL's settings under epilog: where neither epilog:
    nor epilog:lookup: sets them (an epilog: that is not a mapping is left
    as it is, for the rules to refuse)."""
    given = pillar.get("epilog", {})
    given = {} if given is None else given
    if not isinstance(given, dict):
        return pillar
    lookup = given.get("lookup") if isinstance(given.get("lookup"), dict) else {}
    return {**pillar, "epilog": {**{key: value for key, value in MINIMAL.items() if key not in lookup}, **given}}


def render(tmp_path, pillar, os_family="Debian", validate=True, root=REPO / "salt", bare=False):
    """settings.jinja's JSON for PILLAR on a node of OS_FAMILY."""
    text = render_text(tmp_path, (root / "epilog/settings.jinja").read_text(), pillar, os_family, validate, root=root,
                       bare=bare)
    return yaml.safe_load(text)


def render_text(tmp_path, template, pillar, os_family="Debian", validate=True, root=REPO / "salt", opts_more=None,
                salt_more=None, bare=False, **more):
    """TEMPLATE rendered by Salt's Jinja as the formula's files are (the
    formula's tree, ROOT, as salt://, PILLAR and the grains as data, MORE in
    the context; OPTS_MORE over the minion's options, SALT_MORE beside the
    execution functions a render here has). PILLAR is completed by
    minimal() unless BARE: what it does not set is the defaults'."""
    pillar = pillar if bare else minimal(pillar)
    opts = copy.deepcopy(salt.config.DEFAULT_MINION_OPTS)
    opts.update({"file_roots": {"base": [str(root)]}, "file_client": "local", "cachedir": str(tmp_path)},
                **(opts_more or {}))

    def pillar_get(key, default=None):
        here = pillar
        for part in key.split(":"):
            if not isinstance(here, dict) or part not in here:
                return default
            here = here[part]
        return here

    functions = {
        "grains.get": lambda key, default="": {"os_family": os_family}.get(key, default),
        "pillar.get": pillar_get,
        "slsutil.merge": lambda a, b, merge_lists=False: dictupdate.merge(a, b, merge_lists=merge_lists),
        **(salt_more or {}),
    }
    context = {"opts": opts, "saltenv": "base", "salt": functions, "tpldir": "epilog", "validate": validate,
               "grains": {"os_family": os_family}, "pillar": pillar, **more}
    return salt_templates.render_jinja_tmpl(template, context)


def merged(tmp_path, pillar, os_family="Debian"):
    """map.jinja's epilog: the merge with the package names, which the
    states install and no release holds."""
    text = render_text(tmp_path, '{%- from "epilog/map.jinja" import epilog with context %}{{ epilog | json }}', pillar,
                       os_family, True)
    return json.loads(text)


def test_the_defaults_are_the_settings_of_the_least_pillar(tmp_path):
    out = render(tmp_path, {})
    assert out["rules"] == RULES
    # and the module's names of what the states lay down are layout.yaml's
    assert out["layout"] == LAYOUT
    family = tuple(UNHELD)
    # an empty stop_file is filled in: the file beside the chain
    assert DEFAULTS["stop_file"] == "" and out["settings"]["stop_file"] == "/etc/slurm/epilog.stop"
    # the operators have no default: the least pillar's are the settings'
    assert DEFAULTS["localusers"] is None and out["settings"]["localusers"] == MINIMAL["localusers"]
    assert {key: out["settings"][key] for key in DEFAULTS if key not in family and key not in ("stop_file", "localusers")} \
        == {key: value for key, value in DEFAULTS.items() if key not in family and key not in ("stop_file", "localusers")}
    # what differs per family is in no release's settings
    assert not set(family) & set(out["settings"])
    assert merged(tmp_path, {})["pkgs"] == ["python3"]
    assert merged(tmp_path, {})["pam_adopt_module"] == DEFAULTS["pam_adopt_module"]


NO_PILLAR = "no epilog pillar on this minion: the top file assigns it none, or its key is misspelt"
NOT_SET = ("epilog:localusers is not set: the formula has no default for the operator accounts the chain never "
           "touches (their processes, files and ssh access); list them in the pillar, root at least, e.g. "
           "localusers: [root] (see pillar.example)")


@pytest.mark.parametrize("pillar,message", [
    ({}, NO_PILLAR + ". The formula has no default for epilog:localusers, the operator accounts the chain never "
     "touches: set it, root at least (see pillar.example)"),
    ({"epilog_clean": {}, "slurm": {}}, NO_PILLAR + ". The formula has no default for epilog:localusers"),
    ({"epliog": {"localusers": ["root", "je.kim"]}}, NO_PILLAR + " (the pillar holds epliog:; did you mean epilog:?)"),
    ({"Epilog": {}, "epilog_rollout": {}}, NO_PILLAR + " (the pillar holds Epilog:; did you mean epilog:?)"),
    ({"epilog": None}, NOT_SET),
    ({"epilog": {}}, NOT_SET),
    ({"epilog": {"mode": "observe", "ssh_access": "none"}}, NOT_SET),
    ({"epilog": {"localusers": None}}, NOT_SET),
    # a typo of it is named as such, before the setting it misses
    ({"epilog": {"localuser": ["root"]}}, "epilog:localuser is not a setting of the epilog formula; did you mean "
                                         "epilog:localusers?"),
])
def test_a_minion_without_the_operators_list_is_refused_naming_what_is_missing(tmp_path, pillar, message):
    """The defaults alone never lay a chain down: without an epilog pillar
    (not assigned, or under a misspelt key) or without epilog:localusers,
    every state, verify and sweep fail with the one message, rather than
    run with root as the only operator."""
    with pytest.raises(salt.exceptions.SaltException) as caught:
        render(tmp_path, pillar, bare=True)
    assert message in str(caught.value)


@pytest.mark.parametrize("pillar", [{"epilog": {"localusers": []}}, {"epilog": {"lookup": {"localusers": ["ops"]}}}])
def test_the_operators_list_stated_even_empty_or_under_lookup_is_set(tmp_path, pillar):
    out = render(tmp_path, pillar, bare=True)["settings"]
    assert out["localusers"] == (pillar["epilog"].get("lookup") or pillar["epilog"])["localusers"]


def test_a_rollback_works_without_any_epilog_pillar(tmp_path):
    """validate=False (rollback, checkpoint) asks for no pillar: the way
    back must work on a minion whose pillar is gone."""
    out = render(tmp_path, {}, validate=False, bare=True)["settings"]
    assert out["localusers"] is None and out["slurm_config_dir"] == DEFAULTS["slurm_config_dir"]


def test_the_pillar_over_lookup_over_the_family_over_the_defaults(tmp_path):
    pillar = {"epilog": {"lookup": {"pkgs": ["python39"], "sweep_budget": 4, "localusers": ["a"]},
                         "sweep_budget": 5, "localusers": ["root", "-v"], "slurm_config_dir": "/opt/slurm/etc/"}}
    out = render(tmp_path, pillar, os_family="RedHat")["settings"]
    assert merged(tmp_path, pillar, "RedHat")["pkgs"] == ["python39"]
    assert out["sweep_budget"] == 5
    assert out["localusers"] == ["root", "-v"], "lists are replaced, not merged; a leading - is a name"
    assert out["slurm_config_dir"] == "/opt/slurm/etc"
    assert "lookup" not in out


@pytest.mark.parametrize("pillar,message", [
    ({"localusers": "root"}, "epilog:localusers must be a list of account names"),
    ({"localusers": ["root", 7]}, "epilog:localusers[1] (7) is not a string"),
    ({"localusers": [""]}, "epilog:localusers[0] ('') is empty"),
    ({"localusers": ["je kim"]}, "epilog:localusers[0] ('je kim') holds whitespace"),
    ({"localusers": ["root\nalice"]}, "epilog:localusers[0] ('root\\nalice') holds whitespace or a newline"),
    ({"localusers": ["a:b"]}, "epilog:localusers[0] ('a:b') holds a character other than"),
    ({"localusers": ["$(reboot)"]}, "epilog:localusers[0] ('$(reboot)') holds a character other than"),
    ({"pkgs": ["-oops"]}, "epilog:pkgs[0] ('-oops') is not a package name"),
    ({"ssh_access": "pam"}, "epilog:ssh_access ('pam') must be one of listfile, adopt, none"),
    ({"ssh_access": None}, "epilog:ssh_access (None) must be one of listfile, adopt, none"),
    ({"ssh_access": ["adopt"]}, "epilog:ssh_access (['adopt']) must be one of"),
    ({"pam_manage": "yes"}, "epilog:pam_manage ('yes') must be true or false"),
    ({"pam_manage": True, "ssh_access": "none"}, "epilog:pam_manage is true, but epilog:ssh_access is none: the "
     "formula lays down sshd's account lines only under adopt or listfile"),
    ({"pam_manage": True, "ssh_access": "adopt", "pam_operators_file": "/etc/localusers"},
     "epilog:pam_operators_file ('/etc/localusers') is also epilog:ssh_allow_file"),
    ({"pam_adopt_module": "pam_slurm_adopt.so"}, "epilog:pam_adopt_module ('pam_slurm_adopt.so') must be an absolute"),
    ({"log_file": "relative/epilog.log"}, "epilog:log_file ('relative/epilog.log') must be an absolute path"),
    ({"run_dir": "/run/../etc"}, "epilog:run_dir ('/run/../etc') must be an absolute path"),
    ({"slurm_config_dir": "/etc/slurm conf"}, "epilog:slurm_config_dir ('/etc/slurm conf') must be"),
    ({"ssh_allow_file": ["/etc/localusers"]}, "epilog:ssh_allow_file (['/etc/localusers']) must be"),
    ({"part_timeout": 0}, "epilog:part_timeout (0) must be a whole number of seconds from 1 to 3600"),
    ({"chain_timeout": 3601}, "epilog:chain_timeout (3601) must be a whole number of seconds from 1 to 3600"),
    ({"sweep_budget": 2.5}, "epilog:sweep_budget (2.5) must be a whole number of seconds"),
    ({"sweep_budget": True}, "epilog:sweep_budget (True) must be a whole number of seconds"),
    ({"squeue_timeout": "5"}, "epilog:squeue_timeout ('5') must be a whole number of seconds"),
    ({"keep_releases": 1}, "epilog:keep_releases (1) must be a whole number from 2 to 100"),
    ({"record_file": "records.jsonl"}, "epilog:record_file ('records.jsonl') must be an absolute path"),
    ({"record_max_kb": 8}, "epilog:record_max_kb (8) must be a whole number of KiB from 16 to 65536"),
    ({"record_max_kb": 65537}, "epilog:record_max_kb (65537) must be a whole number of KiB from 16 to 65536"),
    ({"record_file": "/var/log/slurm-epilog/records/"}, "epilog:record_file ('/var/log/slurm-epilog/records/') must name a file"),
    ({"metrics_file": "/var/log/slurm-epilog/epilog.log"},
     "epilog:metrics_file ('/var/log/slurm-epilog/epilog.log') is also epilog:log_file"),
    ({"record_file": "/etc/localusers"}, "epilog:record_file ('/etc/localusers') is also epilog:ssh_allow_file"),
    ({"record_max_kb": "1024"}, "epilog:record_max_kb ('1024') must be a whole number of KiB"),
    ({"metrics_file": "/var/lib/prom/../x.prom"}, "epilog:metrics_file ('/var/lib/prom/../x.prom') must be empty, or an"),
    ({"metrics_file": ["/x.prom"]}, "epilog:metrics_file (['/x.prom']) must be empty, or an absolute path"),
    ({"scratch_patterns": "slurm{jobid}"}, "epilog:scratch_patterns must be a list of patterns"),
    ({"scratch_patterns": ["*{jobid}"]}, "epilog:scratch_patterns[0] ('*{jobid}') must hold {jobid} once"),
    ({"scratch_patterns": [".x{jobid}"]}, "epilog:scratch_patterns[0] ('.x{jobid}') must hold"),
    ({"scratch_patterns": ["a/{jobid}"]}, "epilog:scratch_patterns[0] ('a/{jobid}') must hold"),
    ({"scratch_patterns": ["slurm{jobid}{jobid}"]}, "must hold {jobid} once"),
    ({"scratch_patterns": ["slurm"]}, "epilog:scratch_patterns[0] ('slurm') must hold"),
    ({"mode": "dry-run"}, "epilog:mode ('dry-run') must be one of enforce, observe"),
    ({"mode": True}, "epilog:mode (True) must be one of enforce, observe"),
    ({"mode": None}, "epilog:mode (None) must be one of enforce, observe"),
    ({"stop_file": "epilog.stop"}, "epilog:stop_file ('epilog.stop') must be an absolute path"),
    ({"stop_file": "/etc/slurm/../tmp/epilog.stop"}, "epilog:stop_file ('/etc/slurm/../tmp/epilog.stop') must be"),
    ({"stop_file": "/etc/slurm/stop/"}, "epilog:stop_file ('/etc/slurm/stop/') must name a file: no trailing /"),
    ({"stop_file": "/var/log/slurm-epilog/epilog.log"},
     "epilog:stop_file ('/var/log/slurm-epilog/epilog.log') is also epilog:log_file"),
    ({"stop_file": ["/etc/slurm/epilog.stop"]}, "epilog:stop_file (['/etc/slurm/epilog.stop']) must be an absolute"),
    ({"parts": ["42-lastuserjob-cleanup"]}, "epilog:parts must be a mapping of settings (39-lastuserjob-ssh, "
                                            "40-lastuserjob-processes, 42-lastuserjob-cleanup, 45-stale-x-display, "
                                            "50-exclusive-ssh), got: ['42-lastuserjob-cleanup']"),
    ({"parts": {"42-lastuserjob-cleanp": False}}, "epilog:parts:42-lastuserjob-cleanp is not a setting of the epilog "
                                                  "formula; did you mean epilog:parts:42-lastuserjob-cleanup?"),
    ({"parts": {"41-lastuserjob-ssh": False}}, "epilog:parts:41-lastuserjob-ssh is not a setting of the epilog "
                                               "formula; did you mean epilog:parts:39-lastuserjob-ssh?"),
    ({"parts": {42: False}}, "epilog:parts:42 is not a setting of the epilog formula, nor near one"),
    ({"parts": {"40-lastuserjob-processes": "off"}}, "epilog:parts:40-lastuserjob-processes ('off') must be true or false"),
    ({"parts": {"45-stale-x-display": 0}}, "epilog:parts:45-stale-x-display (0) must be true or false"),
    ({"parts": {"50-exclusive-ssh": False}}, "epilog:parts:50-exclusive-ssh is false under epilog:ssh_access "
                                             "listfile: part 50 is what adds a job's user"),
    ({"sweep_budget": 20, "part_timeout": 20}, "epilog:sweep_budget (20) must be below epilog:part_timeout (20)"),
    ({"chain_timeout": 40, "part_timeout": 20},
     "epilog:chain_timeout (40) must leave room for the decision, one part and the runner"),
    ({"chain_timeout": 34}, "epilog:chain_timeout (34) must leave room for the decision, one part and the runner"),
])
def test_a_bad_pillar_is_refused_naming_its_entry(tmp_path, pillar, message):
    with pytest.raises(salt.exceptions.SaltException) as caught:
        render(tmp_path, {"epilog": pillar})
    assert message in str(caught.value)


@pytest.mark.parametrize("access", ["adopt", "listfile"])
def test_the_formula_owns_sshds_account_lines_under_adopt_and_listfile(tmp_path, access):
    out = render(tmp_path, {"epilog": {"pam_manage": True, "ssh_access": access}})["settings"]
    assert out["pam_manage"] is True and out["ssh_access"] == access


@pytest.mark.parametrize("localusers,operators", [
    (["root"], ["root"]), (["je.kim", "root", "ops"], ["root", "je.kim", "ops"]), ([], ["root"]),
])
def test_the_operators_list_has_one_home_map_jinja_which_the_module_and_pam_sls_read(tmp_path, localusers, operators):
    """Root first, then localusers: map.jinja computes it once; the module
    reads it through settings.jinja (family=True, beside the settings no
    release holds), pam.sls lays it down, and no release holds it."""
    pillar = {"epilog": {"localusers": localusers}}
    text = render_text(tmp_path, (REPO / "salt/epilog/settings.jinja").read_text(), pillar, family=True)
    out = json.loads(text)
    assert out["family"]["operators"] == operators and "operators" not in out["settings"]
    assert "operators" not in render(tmp_path, pillar)
    assert "{{ operators | join(nl) | json }}" in (REPO / "salt/epilog/pam.sls").read_text()
    # the module reads it there, and, from a formula tree whose settings.jinja
    # gives none (a module synced newer than the master's tree), makes the same
    pampolicy = load_file(REPO / "_modules/epilog.py", "epilog_module_operators").pampolicy
    settings = {**out["settings"], **out["family"]}
    assert pampolicy._operators(settings) == operators
    assert pampolicy._operators({**settings, "operators": ["root", "given"]}) == ["root", "given"]
    del settings["operators"]
    assert pampolicy._operators(settings) == operators


def test_the_stop_file_is_beside_the_chain_unless_the_pillar_names_one(tmp_path):
    for pillar, expect in (({"slurm_config_dir": "/opt/slurm/etc/"}, "/opt/slurm/etc/epilog.stop"),
                           ({"stop_file": None}, "/etc/slurm/epilog.stop"),
                           ({"stop_file": "/etc/epilog-brake"}, "/etc/epilog-brake")):
        assert render(tmp_path, {"epilog": pillar})["settings"]["stop_file"] == expect, pillar


def test_a_part_turned_off_merges_with_the_others_on_and_every_release_holds_them(tmp_path):
    out = render(tmp_path, {"epilog": {"parts": {"42-lastuserjob-cleanup": False}, "mode": "observe"}})["settings"]
    assert out["parts"] == {**DEFAULTS["parts"], "42-lastuserjob-cleanup": False}
    assert out["mode"] == "observe" and {"mode", "stop_file", "parts"} <= set(out)


def test_the_parts_settings_name_the_formulas_parts_each_on():
    """epilog:parts lists every part layout.yaml lays down in epilog.d/ and
    prolog.d/, each on: the rules take the known names from defaults.yaml."""
    names = [script["path"].split("/", 1)[1] for script in LAYOUT["scripts"] if "/" in script["path"]]
    assert DEFAULTS["parts"] == dict.fromkeys(names, True)


@pytest.mark.parametrize("metrics_file", ["", None, "/var/lib/prometheus/node-exporter/epilog.prom"])
def test_metrics_are_optional_and_a_path_when_set(tmp_path, metrics_file):
    out = render(tmp_path, {"epilog": {"metrics_file": metrics_file}})
    assert out["settings"]["metrics_file"] == metrics_file


def test_the_recovery_operations_get_the_merge_without_the_checks(tmp_path):
    """rollback and checkpoint (validate=False) must work under the pillar
    that broke a deploy: the same merge, no refusal, not even of a key the
    formula does not know."""
    out = render(tmp_path, {"epilog": {"localusers": ["bad user"], "part_timeout": 0, "slurm_config_dir": "/x/",
                                       "localuser": ["je.kim"], "lookup": {"pkg": []}}},
                 validate=False)["settings"]
    assert out["localusers"] == ["bad user"] and out["part_timeout"] == 0 and out["slurm_config_dir"] == "/x"


def test_the_sweep_refuses_exactly_the_scratch_patterns_the_rules_refuse():
    """The sweep runs on nodes without rules.yaml, so it holds the pattern
    itself (sweep_names, compiled by the sweep): the very same one."""
    from tests.unit.conftest import node  # pylint: disable=import-outside-toplevel

    assert node("sweep_names").SCRATCH_PATTERN == RULES["scratch_pattern"]
    assert node("sweep").PATTERN_OK.pattern == RULES["scratch_pattern"]


@pytest.mark.parametrize("name,ok", [
    ("root", True), ("je.kim", True), ("-v", True), ("a@b", True), ("s_shin-2", True),
    ("a b", False), ("a:b", False), ("a/b", False), ("é", False), ("a\n", False), ("$x", False), ("", False),
])
def test_the_account_rule(name, ok):
    assert bool(re.fullmatch(f"[{RULES['account_chars']}]+", name)) is ok


def test_pillar_example_lists_every_setting_at_its_default():
    """Every setting but those whose default is per os_family: those are
    comments, so that the file as copied keeps each family's own."""
    example = yaml.safe_load((REPO / "pillar.example").read_text())["epilog"]
    per_family = {key for family in OSFAMILYMAP.values() for key in family}
    # and what has no default (localusers) at the least a pillar can hold
    assert example == {**{key: value for key, value in DEFAULTS.items() if key not in per_family}, **MINIMAL}
    assert all(DEFAULTS[key] is None for key in MINIMAL)
    for key in per_family & set(DEFAULTS):
        assert f"  # {key}: {DEFAULTS[key]}\n" in (REPO / "pillar.example").read_text(), key


@pytest.mark.parametrize("os_family", sorted(OSFAMILYMAP))
def test_pillar_example_as_copied_keeps_each_familys_own_values(tmp_path, os_family):
    """Copied as it is, on any family, it is valid and sets nothing of what
    that family's osfamilymap.yaml entry holds (pam_slurm_adopt's path)."""
    example = yaml.safe_load((REPO / "pillar.example").read_text())
    settings = merged(tmp_path, example, os_family)
    assert {key: settings[key] for key in OSFAMILYMAP[os_family]} == OSFAMILYMAP[os_family]


def test_the_changelogs_latest_version_is_formulas():
    formula = yaml.safe_load((REPO / "FORMULA").read_text())["version"]
    latest = re.search(r"^## \[([0-9.]+)\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert latest and latest.group(1) == formula
