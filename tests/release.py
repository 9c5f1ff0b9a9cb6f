"""A chain laid down without Salt, for the tests of the node program: the
release the state would lay down for these settings (the entry points
rendered from the formula's templates, the node program, settings.json,
localusers.backup), made current by the real release.py. A test of the node
program needs a settings file, not a state.apply; tests/salt holds the
state to this (test_state's test_a_release_without_salt_is_the_states)."""
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import jinja2
import yaml

REPO = Path(__file__).resolve().parents[1]
FORMULA = REPO / "salt/epilog"
LAYOUT = yaml.safe_load((FORMULA / "layout.yaml").read_text())
RULES = yaml.safe_load((FORMULA / "rules.yaml").read_text())
DEFAULTS = yaml.safe_load((FORMULA / "defaults.yaml").read_text())["epilog"]
# the settings no release holds, as map.jinja names them
UNHELD = yaml.safe_load(next(line.split("unheld_keys =", 1)[1].split("%}", 1)[0]
                             for line in (FORMULA / "map.jinja").read_text().splitlines()
                             if "set unheld_keys =" in line))
PACKAGE = REPO / "salt/_modules" / LAYOUT["package"]


def package_files():
    return sorted(p.name for p in PACKAGE.glob("*.py"))


def settings_of(**settings):
    """defaults.yaml with SETTINGS over it, as map.jinja merges them (lists
    replaced, mappings merged; slurm_config_dir without a trailing /, an
    empty stop_file the one beside it), without what no
    release holds (map.jinja's unheld_keys: what differs per os_family, the
    schedule): what settings.json holds. localusers has no default: as
    map.jinja, it refuses SETTINGS without it."""
    if settings.get("localusers") is None:
        raise ValueError("epilog:localusers is not set: the formula has no default for it")
    merged = dict(DEFAULTS)
    for key, value in settings.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}  # mappings merge (epilog:parts), as slsutil.merge does
        else:
            merged[key] = str(value) if isinstance(value, Path) else value
    if not merged.get("stop_file"):
        merged["stop_file"] = merged["slurm_config_dir"].rstrip("/") + "/epilog.stop"
    merged["slurm_config_dir"] = merged["slurm_config_dir"].rstrip("/") or "/"
    for key in UNHELD:
        merged.pop(key, None)
    return merged


def render(template, **context):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(FORMULA / "files")), keep_trailing_newline=True)
    return env.get_template(template).render(**context)


def lay_down(view=Path, prefix=(), **settings):
    """Lay the chain of SETTINGS (defaults.yaml's, each overridden) down as
    the state would, and make its release current with release.py. VIEW
    maps a path of the node to where this process sees it, PREFIX runs a
    command there (a mount namespace). Returns the release's directory, as
    the node sees it."""
    held = settings_of(**settings)
    node_confdir = Path(held["slurm_config_dir"])
    confdir = view(node_confdir)
    releases = confdir / LAYOUT["releases"]["dir"]
    for directory in [confdir / d for d in LAYOUT["directories"]] + [releases]:
        directory.mkdir(parents=True, exist_ok=True)
        os.chmod(directory, 0o755)
    for key in ("log_file", "record_file", "metrics_file"):
        if held.get(key):
            view(Path(held[key]).parent).mkdir(parents=True, exist_ok=True)
    lock = confdir / next(f["path"] for f in LAYOUT["data"] if f["id"] == "config-ssh-allow-lock")
    if not lock.exists():
        lock.touch(mode=0o600)
    tool = releases / LAYOUT["releases"]["tool"]["path"]
    shutil.copy(REPO / "salt/_modules" / LAYOUT["releases"]["tool"]["module"], tool)
    os.chmod(tool, 0o755)
    data = json.dumps({"settings": held, "rules": RULES, "layout": LAYOUT}, sort_keys=True)
    inputs = [data] + [(PACKAGE / name).read_text() for name in package_files()]
    for script in LAYOUT["scripts"]:
        inputs.append((FORMULA / "files" / script["source"]).read_text())
    rid = hashlib.sha256("\n".join(inputs).encode()).hexdigest()[:12]
    top = releases / rid
    expect = {script["path"]: "755" for script in LAYOUT["scripts"]}
    expect.update({item["path"]: item["mode"][1:] for item in LAYOUT["release_data"]})
    expect.update({f"{LAYOUT['package']}/{name}": "644" for name in package_files()})
    made = (top / "MANIFEST.sha256").exists()
    if not made:
        for sub in [""] + LAYOUT["release_directories"]:
            (top / sub).mkdir(parents=True, exist_ok=True)
            os.chmod(top / sub, 0o755)
        for script in LAYOUT["scripts"]:
            (top / script["path"]).write_text(render(script["source"], stage=script["stage"]))
        files = {"localusers-backup": "".join(name + "\n" for name in held["localusers"]), "settings": data}
        for item in LAYOUT["release_data"]:
            (top / item["path"]).write_text(files[item["id"]])
        for name in package_files():
            shutil.copy(PACKAGE / name, top / LAYOUT["package"] / name)
        for rel, mode in expect.items():
            os.chmod(top / rel, int(mode, 8))
    current = releases / LAYOUT["releases"]["current"]
    if not made or not current.is_symlink() or os.readlink(current) != rid:
        node_tool = node_confdir / tool.relative_to(confdir)
        args = [*prefix, "/usr/bin/python3", "-I", "-B", str(node_tool), "--root", str(node_confdir), "activate", rid,
                "--keep", str(held["keep_releases"]), "--grace", str(held["chain_timeout"] + 60)]
        args += [f"--expect={rel}:{mode}" for rel, mode in expect.items()]
        args += [f"--entry={name}" for name in LAYOUT["entries"]]
        ret = subprocess.run(args, capture_output=True, text=True)
        report = json.loads(ret.stdout)
        assert report["result"], report
    return node_confdir / top.relative_to(confdir)
