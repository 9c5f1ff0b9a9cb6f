"""A key the formula does not know fails the render, naming the key and the
known key nearest to it (salt/epilog/strict.jinja): under epilog:,
epilog:lookup:, a setting whose default is a mapping (schedule), and the
rollout's and clean's own keys. Rendered through Salt's Jinja as in
test_settings; no root and no loader. The known keys are defaults.yaml's,
osfamilymap.yaml's and lookup: a key added to defaults.yaml is known with
nothing else to change."""
import shutil

import pytest
import yaml

from tests.helpers import REPO
from tests.unit.test_settings import DEFAULTS, MINIMAL, merged, render, render_text

salt_exceptions = pytest.importorskip("salt.exceptions")


def refusal(render_it):
    with pytest.raises(salt_exceptions.SaltException) as caught:
        render_it()
    return str(caught.value)


def nearest(tmp_path, key, known):
    template = '{%- from "epilog/strict.jinja" import nearest %}{{ nearest(key, known) }}'
    return render_text(tmp_path, template, {}, key=key, known=known)


@pytest.mark.parametrize("typo,meant", [
    ("localuser", "localusers"), ("local_users", "localusers"), ("LocalUsers", "localusers"),
    ("localusers ", "localusers"), ("ssh-access", "ssh_access"), ("SSH_ACCESS", "ssh_access"), ("shedule", "schedule"),
    ("scheduel", "schedule"), ("sweep_bugdet", "sweep_budget"), ("pam_adopt_modul", "pam_adopt_module"),
    ("log_max_kib", "log_max_kb"), ("keep_release", "keep_releases"), ("chain-timeout", "chain_timeout"),
])
def test_a_typo_of_a_setting_is_near_it(tmp_path, typo, meant):
    known = list(DEFAULTS)
    assert nearest(tmp_path, typo, known) == meant


@pytest.mark.parametrize("key", ["operators", "users", "timeout", "x", "debug", "pam"])
def test_a_key_near_no_setting_has_no_nearest(tmp_path, key):
    assert nearest(tmp_path, key, list(DEFAULTS)) == ""


def test_the_nearest_is_the_first_of_the_closest_in_the_known_order(tmp_path):
    assert nearest(tmp_path, "kill_stray", ["interval", "splay", "kill_strays"]) == "kill_strays"
    assert nearest(tmp_path, "splay", ["interval", "splay"]) == "splay"
    assert nearest(tmp_path, "ab", ["ac", "ad"]) == "ac"
    assert nearest(tmp_path, 5, ["interval"]) == ""


@pytest.mark.parametrize("pillar,message", [
    ({"localuser": ["root", "je.kim"]},
     "epilog:localuser is not a setting of the epilog formula; did you mean epilog:localusers?"),
    ({"local_users": ["root"]}, "epilog:local_users is not a setting of the epilog formula; did you mean epilog:localusers?"),
    ({"LocalUsers": ["root"]}, "epilog:LocalUsers is not a setting of the epilog formula; did you mean epilog:localusers?"),
    ({"ssh-access": "adopt"}, "epilog:ssh-access is not a setting of the epilog formula; did you mean epilog:ssh_access?"),
    ({"shedule": {"interval": 600}}, "epilog:shedule is not a setting of the epilog formula; did you mean epilog:schedule?"),
    ({"schedule": {"interval": 600, "kill_stray": True}},
     "epilog:schedule:kill_stray is not a setting of the epilog formula; did you mean epilog:schedule:kill_strays?"),
    ({"lookup": {"pkg": ["python3"]}},
     "epilog:lookup:pkg is not a setting of the epilog formula; did you mean epilog:lookup:pkgs?"),
    ({"lookup": {"localuser": ["root"]}},
     "epilog:lookup:localuser is not a setting of the epilog formula; did you mean epilog:lookup:localusers?"),
    ({"lookup": {"schedule": {"intervall": 600}}},
     "epilog:lookup:schedule:intervall is not a setting of the epilog formula; did you mean "
     "epilog:lookup:schedule:interval?"),
    ({"lookup": {"lookup": {}}}, "epilog:lookup:lookup is not a setting of the epilog formula, nor near one"),
    ({"debug": True}, "epilog:debug is not a setting of the epilog formula, nor near one; the settings under epilog: "
                      "are: " + ", ".join(DEFAULTS)),
    ({7: "x"}, "epilog:7 is not a setting of the epilog formula, nor near one"),
    ({"schedule": "hourly"}, "epilog:schedule must be a mapping of settings (interval, splay, kill_strays), got: 'hourly'"),
    ({"lookup": ["pkgs"]}, "epilog:lookup must be a mapping of settings"),
])
def test_an_unknown_key_is_refused_naming_it_and_the_nearest(tmp_path, pillar, message):
    assert message in refusal(lambda: render(tmp_path, {"epilog": pillar}))


def test_every_unknown_key_of_a_level_is_named_in_one_refusal(tmp_path):
    """A pillar copied with three typos fails once, naming all three (not one
    per state run), each with its nearest setting; a known key beside them is
    not named."""
    message = refusal(lambda: render(tmp_path, {"epilog": {"localuser": ["root"], "mode": "observe", "shedule": {},
                                                           "debug": True}}))
    assert "epilog:localuser is not a setting of the epilog formula; did you mean epilog:localusers?" in message
    assert "epilog:shedule is not a setting of the epilog formula; did you mean epilog:schedule?" in message
    assert "epilog:debug is not a setting of the epilog formula, nor near one" in message
    assert "epilog:mode " not in message


def test_epilog_itself_must_be_a_mapping_and_may_be_empty(tmp_path):
    assert "epilog must be a mapping of settings (slurm_config_dir, " in refusal(
        lambda: render(tmp_path, {"epilog": ["localusers"]}))
    assert render(tmp_path, {"epilog": None})["settings"]["localusers"] == ["root"]


def test_every_known_key_is_accepted_under_epilog_and_lookup(tmp_path):
    """defaults.yaml's keys, osfamilymap.yaml's (pkgs, pam_adopt_module) and
    lookup, each at its default (localusers, which has none, at the least
    pillar's)."""
    family = yaml.safe_load((REPO / "salt/epilog/osfamilymap.yaml").read_text())["RedHat"]
    every = {**DEFAULTS, **family, **MINIMAL}
    settings = merged(tmp_path, {"epilog": {**every, "lookup": every}}, "RedHat")
    # (map.jinja fills the empty stop_file in: beside the chain)
    assert {key: settings[key] for key in every} == {**every, "stop_file": "/etc/slurm/epilog.stop"}


def test_a_key_added_to_defaults_yaml_is_known_with_nothing_else_to_change(tmp_path):
    """The known keys are data: a setting and a mapping of settings added to
    defaults.yaml (as `parts` is, a part name each) are accepted, and a typo
    under the mapping is refused with the nearest of its keys."""
    root = tmp_path / "salt"
    shutil.copytree(REPO / "salt/epilog", root / "epilog")
    defaults = yaml.safe_load((root / "epilog/defaults.yaml").read_text())
    defaults["epilog"].update(mode="enforce", parts={"39-lastuserjob-ssh": True, "45-stale-x-display": True})
    (root / "epilog/defaults.yaml").write_text(yaml.safe_dump(defaults, sort_keys=False))
    pillar = {"epilog": {"mode": "observe", "parts": {"45-stale-x-display": False}}}
    settings = render(tmp_path, pillar, root=root)["settings"]
    assert settings["mode"] == "observe" and settings["parts"] == {"39-lastuserjob-ssh": True, "45-stale-x-display": False}
    assert "epilog:parts:45-stale-x-dsplay is not a setting of the epilog formula; did you mean " \
           "epilog:parts:45-stale-x-display?" in refusal(
               lambda: render(tmp_path, {"epilog": {"parts": {"45-stale-x-dsplay": False}}}, root=root))
    assert "did you mean epilog:mode?" in refusal(lambda: render(tmp_path, {"epilog": {"Mode": "observe"}}, root=root))


@pytest.mark.parametrize("sls,pillar,message", [
    ("rollout", {"epilog_rollout": {"target": "slurm-work-*", "bacth": 2}},
     "epilog_rollout:bacth is not a setting of epilog.rollout; did you mean epilog_rollout:batch?"),
    ("rollout", {"epilog_rollout": {"targets": "slurm-work-*"}},
     "epilog_rollout:targets is not a setting of epilog.rollout; did you mean epilog_rollout:target?"),
    ("rollout", {"epilog_rollout": {"target": "slurm-work-*", "tgt-type": "list"}},
     "epilog_rollout:tgt-type is not a setting of epilog.rollout; did you mean epilog_rollout:tgt_type?"),
    ("rollout", {"epilog_rollout": {"target": "slurm-work-*", "failhard": True}},
     "epilog_rollout:failhard is not a setting of epilog.rollout, nor near one; the settings under epilog_rollout: "
     "are: target, tgt_type, batch, canary, name"),
    ("rollout", {"epilog_rollout": "slurm-work-*"},
     "epilog_rollout must be a mapping of settings (target, tgt_type, batch, canary, name), got: 'slurm-work-*'"),
    ("clean", {"epilog_clean": {"slurm_conf_dir": "/etc/slurm-old"}},
     "epilog_clean:slurm_conf_dir is not a setting of epilog.clean; did you mean epilog_clean:slurm_config_dir?"),
    ("clean", {"epilog_clean": {"dir": "/etc/slurm-old"}},
     "epilog_clean:dir is not a setting of epilog.clean, nor near one; the settings under epilog_clean: are: "
     "slurm_config_dir"),
])
def test_an_unknown_key_of_the_rollout_or_clean_is_refused_naming_it_and_the_nearest(tmp_path, sls, pillar, message):
    template = (REPO / f"salt/epilog/{sls}.sls").read_text()
    assert message in refusal(lambda: render_text(tmp_path, template, pillar))


def clean_head():
    """clean.sls up to its first call of the module (chain_wired): its
    imports of the settings and its own checks, then the directory it
    would clean."""
    text = (REPO / "salt/epilog/clean.sls").read_text()
    return text[:text.index("{%- set wired = ")] + "{{ confdir }}"


@pytest.mark.parametrize("pillar", [{}, {"epilog": {"mode": "observe"}}])
def test_clean_needs_no_operators_list(tmp_path, pillar):
    """epilog.clean removes the chain from a minion whose epilog pillar is
    gone, or never named the operators: its settings render, asking for no
    localusers, and it would clean the default directory."""
    assert render_text(tmp_path, clean_head(), pillar, bare=True).strip().endswith(DEFAULTS["slurm_config_dir"])


def test_clean_still_checks_what_it_uses(tmp_path):
    assert "epilog:mode" in refusal(lambda: render_text(tmp_path, clean_head(), {"epilog": {"mode": "loud"}},
                                                        bare=True))
