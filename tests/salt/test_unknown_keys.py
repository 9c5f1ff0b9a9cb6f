"""A pillar key the formula does not know, in-process: the state fails,
naming the key and the nearest known one, before any state runs, so
nothing is laid down or removed; epilog.verify fails with the same message;
and a rollback still works under that pillar. The nearest match itself is
tested in the unit tier (tests/unit/test_unknown_keys.py)."""
import pytest

TYPOS = [
    ("epilog", "epilog", {"localuser": ["root", "je.kim"]},
     "epilog:localuser is not a setting of the epilog formula; did you mean epilog:localusers?"),
    ("epilog-lookup", "epilog", {"lookup": {"pkg": ["python3"]}},
     "epilog:lookup:pkg is not a setting of the epilog formula; did you mean epilog:lookup:pkgs?"),
    ("epilog-schedule", "epilog", {"schedule": {"interval": 600, "kill_stray": True}},
     "epilog:schedule:kill_stray is not a setting of the epilog formula; did you mean epilog:schedule:kill_strays?"),
    ("epilog_rollout", "epilog.rollout", {"epilog_rollout": {"target": "slurm-work-*", "bacth": 2}},
     "epilog_rollout:bacth is not a setting of epilog.rollout; did you mean epilog_rollout:batch?"),
    ("epilog_clean", "epilog.clean", {"epilog_clean": {"slurm_conf_dir": "/etc/slurm-old"}},
     "epilog_clean:slurm_conf_dir is not a setting of epilog.clean; did you mean epilog_clean:slurm_config_dir?"),
]


@pytest.mark.parametrize("sls,typo,message", [case[1:] for case in TYPOS], ids=[case[0] for case in TYPOS])
def test_an_unknown_key_fails_the_state_naming_it_and_the_nearest_and_nothing_is_done(node, sls, typo, message):
    # what an apply would replace and a clean would remove, were either to run
    node.conf_dir.mkdir()
    (node.conf_dir / "epilog.sh").write_text("#!/bin/sh\nexit 0\n")
    pillar = dict(node.pillar)
    if sls == "epilog":
        pillar["epilog"] = {**pillar["epilog"], **typo}
    else:
        pillar.update(typo)
    ret = node.minion.apply(sls, pillar=pillar)
    assert not ret.ok and not ret.states, ret
    assert message in "\n".join(ret.errors), ret
    assert [p.name for p in node.conf_dir.iterdir()] == ["epilog.sh"]
    assert not (node.conf_dir / "epilog.sh").is_symlink()
    assert (node.conf_dir / "epilog.sh").read_text() == "#!/bin/sh\nexit 0\n"


def test_verify_fails_with_the_states_message_and_a_rollback_still_works(node):
    """An unknown key must never block the way back: the recovery
    operations skip the check, as they skip every other check of the
    pillar."""
    node.apply()
    first = node.release.name
    node.set_pillar(part_timeout=19)
    node.apply()
    second = node.release.name
    assert second != first
    node.set_pillar(part_timeout=19, localuser=["root", "je.kim"])
    message = "epilog:localuser is not a setting of the epilog formula; did you mean epilog:localusers?"
    before = node.snapshot()
    ret = node.minion.apply()
    assert not ret.ok and message in "\n".join(ret.errors), ret
    assert node.snapshot() == before and node.release.name == second
    # verify answers as a fleet reads it: a coded problem, not an error
    verified = node.run("verify")
    assert verified["result"] is False and verified["release"] is None, verified
    assert verified["problems"] == [f"[pillar-invalid] the epilog settings do not render: {message}; the states "
                                    "refuse it too, and epilog.rollback still works"], verified
    report = node.run("rollback")
    assert report["result"] is True and node.release.name == first, report


NO_PILLAR = ("no epilog pillar on this minion: the top file assigns it none, or its key is misspelt (the pillar "
             "holds epliog:; did you mean epilog:?). The formula has no default for epilog:localusers, the operator "
             "accounts the chain never touches: set it, root at least (see pillar.example)")
NOT_SET = "epilog:localusers is not set: the formula has no default for the operator accounts the chain never touches"


def test_a_minion_without_its_operators_list_is_refused_by_the_state_verify_and_sweep(node):
    """No epilog pillar (a misspelt top key here) or one without localusers:
    the state fails naming what is missing and lays nothing down, verify
    answers it as a coded problem, and a sweep refuses with the same words,
    rather than any of them run with root as the only operator."""
    from salt.exceptions import CommandExecutionError  # pylint: disable=import-outside-toplevel

    node.apply()
    before = node.snapshot()
    without = {key: value for key, value in node.pillar["epilog"].items() if key != "localusers"}
    for pillar, message in (({"epliog": node.pillar["epilog"]}, NO_PILLAR), ({"epilog": without}, NOT_SET)):
        node.minion.set_pillar(pillar)
        ret = node.minion.apply()
        assert not ret.ok and not ret.states and message in "\n".join(ret.errors), ret
        assert node.snapshot() == before
        verified = node.run("verify")
        assert verified["result"] is False and len(verified["problems"]) == 1, verified
        assert verified["problems"][0].startswith(f"[pillar-invalid] the epilog settings do not render: {message}")
        with pytest.raises(CommandExecutionError) as caught:
            node.run("sweep", test=True)
        assert message in str(caught.value)


def test_clean_takes_the_chain_off_a_minion_whose_epilog_pillar_is_gone(node):
    """The way out needs no operators' list: with the epilog pillar gone and
    only epilog_clean:slurm_config_dir given (as the docs say after a
    rename), epilog.clean renders (its module calls too: chain_wired,
    pam_clean), refuses while slurm.conf names the chain, then removes it."""
    node.apply()
    node.minion.set_pillar({"epilog_clean": {"slurm_config_dir": str(node.conf_dir)}})
    (node.conf_dir / "slurm.conf").write_text(f"ClusterName=x\nEpilog={node.conf_dir}/epilog.sh\n")
    refused = node.minion.apply("epilog.clean")
    assert not refused.ok and "refusing to remove the chain" in refused.text, refused
    (node.conf_dir / "slurm.conf").write_text("ClusterName=x\n")
    cleaned = node.minion.apply("epilog.clean")
    assert cleaned.ok, cleaned
    assert sorted(p.name for p in node.conf_dir.iterdir()) == ["slurm.conf"]
