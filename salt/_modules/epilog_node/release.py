#!/usr/bin/python3
"""epilog-release: the releases of the epilog chain on this node. Managed by
Salt (epilog formula); local edits are overwritten.

This file is the node program's release logic (epilog_node/release.py), laid
down on its own as <slurm_config_dir>/epilog-releases/release.py: the tool
that makes a release current is in no release (a rollback runs it). It
imports nothing of the package.

Every deploy lays the whole chain down in a directory of its own,
<slurm_config_dir>/epilog-releases/<id>/ (the entry points, the node
program epilog_node/, settings.json, localusers.backup), named by a hash of
everything the render depends on. This tool then checks that directory
(owners, modes, that every script and Python file compiles, the expected
files and nothing else), records its sha256 manifest,
and makes it current with one rename of the symlink
epilog-releases/current. slurm.conf's Epilog=/Prolog= paths never change:
<slurm_config_dir>/epilog.sh is a symlink to current/epilog.sh, and the
runner, once started, reads its parts and its list from its own release's
directory only, so a job end runs one complete release from start to end
while deploys and rollbacks switch underneath.

  release.py --root DIR activate ID --expect PATH:MODE... --entry NAME...
  release.py --root DIR is-current ID --entry NAME...   (exit 0 or 1)
  release.py --root DIR rollback [--test] [--to-checkpoint NAME]
  release.py --root DIR checkpoint NAME [--test]
  release.py --root DIR status

A checkpoint records, under a name, the release current when it was taken
(or none). The first record of a name is kept: a staged rollout that is run
again under the same name still goes back to what was current before its
first attempt. `rollback --to-checkpoint NAME` switches back to exactly that
release, and changes nothing when it is current already.

Each command prints one JSON object. Standard library only (Python >= 3.6):
it runs on the node without Salt.
"""
import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time

RELEASES = "epilog-releases"  # layout.yaml releases.dir (tests/unit/test_layout.py)
CURRENT = "current"  # layout.yaml releases.current
MANIFEST = "MANIFEST.sha256"
MODES = "MANIFEST.modes"
HISTORY = "history"
ENTRIES = "entries"
CHECKPOINTS = "checkpoints"
CHECKPOINT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,63}\Z")
CHECKPOINT_LINES = 200
ID = re.compile(r"[0-9a-f]{12}\Z")
HISTORY_LINES = 500
# the directory beside a Python file where compile() writes its bytecode
PYCACHE = "__pycache__"


class Refused(Exception):
    """The release cannot be made current; nothing was switched."""


def _lstat(path):
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _readlink(path):
    try:
        return os.readlink(path)
    except OSError:
        return None


def _fsync(path, directory=False):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else os.O_NOFOLLOW))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _root_dir(path, what):
    st = _lstat(path)
    if st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise Refused("%s %s must be a directory owned by root and writable by nobody else" % (what, path))


class Releases:
    def __init__(self, root):
        self.root = root
        self.dir = os.path.join(root, RELEASES)

    # -- reading -------------------------------------------------------------
    def current(self):
        target = _readlink(os.path.join(self.dir, CURRENT))
        return target if target and ID.match(target) else None

    def previous(self):
        """The release before the current one: the `previous` link, or, when
        that is missing or the current one itself (a crash between the two
        renames of a switch), the history's last other release."""
        current = self.current()
        target = _readlink(os.path.join(self.dir, "previous"))
        if target and ID.match(target) and target != current:
            return target
        for _, _, rid in reversed(self.history()):
            if rid != current and os.path.isdir(os.path.join(self.dir, rid)):
                return rid
        return None

    def files(self, rid):
        """{relative path: lstat} of release RID's files, its manifest aside.
        Anything but root's regular files and directories that nobody else
        can write is refused: root runs these."""
        top = os.path.join(self.dir, rid)
        _root_dir(top, "release")
        found = {}
        pending = [""]
        while pending:
            rel = pending.pop()
            for entry in os.scandir(os.path.join(top, rel) if rel else top):
                path = os.path.join(rel, entry.name) if rel else entry.name
                st = entry.stat(follow_symlinks=False)
                if st.st_uid != 0 or st.st_mode & 0o022:
                    raise Refused("%s/%s is not root's, or group or others can write it (uid %d, mode %04o)"
                                  % (top, path, st.st_uid, stat.S_IMODE(st.st_mode)))
                if stat.S_ISDIR(st.st_mode):
                    pending.append(path)
                elif stat.S_ISREG(st.st_mode):
                    if path not in (MANIFEST, MODES):
                        found[path] = st
                else:
                    raise Refused("%s/%s is not a regular file or a directory" % (top, path))
        return found

    def hashes(self, rid, files):
        top = os.path.join(self.dir, rid)
        out = {}
        for rel in sorted(files):
            fd = os.open(os.path.join(top, rel), os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as handle:
                out[rel] = hashlib.sha256(handle.read()).hexdigest()
        return out

    def _read_lines(self, rid, name, pattern):
        path = os.path.join(self.dir, rid, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        out = {}
        for line in text.splitlines():
            value, sep, rel = line.partition("  ")
            if not sep or not re.match(pattern, value):
                raise Refused("%s: unreadable line %r" % (path, line))
            out[rel] = value
        return out

    def manifest(self, rid):
        """The recorded {path: sha256} of RID, or None when it has none."""
        return self._read_lines(rid, MANIFEST, r"[0-9a-f]{64}\Z")

    def modes(self, rid):
        """The recorded {path: mode} of RID, or None."""
        found = self._read_lines(rid, MODES, r"0[0-7]{3}\Z")
        return None if found is None else {rel: int(mode, 8) for rel, mode in found.items()}

    def drift(self, rid):
        """How RID's files differ from its manifest: a list of sentences."""
        recorded, modes = self.manifest(rid), self.modes(rid)
        if recorded is None or modes is None:
            return ["release %s has no manifest %s/%s" % (rid, MANIFEST, MODES)]
        files = self.files(rid)
        now = self.hashes(rid, files)
        out = []
        for rel in sorted(set(recorded) | set(now)):
            path = "%s/%s/%s" % (self.dir, rid, rel)
            if rel not in now:
                out.append("%s is missing" % path)
            elif rel not in recorded:
                out.append("%s is not in the release's manifest" % path)
            elif now[rel] != recorded[rel]:
                out.append("%s changed since the release was made (sha256 %s, manifest %s)"
                           % (path, now[rel], recorded[rel]))
            elif stat.S_IMODE(files[rel].st_mode) != modes.get(rel):
                out.append("%s has mode %04o, not the release's %04o"
                           % (path, stat.S_IMODE(files[rel].st_mode), modes.get(rel, 0)))
        return out

    def history(self):
        out = []
        try:
            with open(os.path.join(self.dir, HISTORY), encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    fields = line.split()
                    if len(fields) == 3 and fields[0].isdigit() and ID.match(fields[2]):
                        out.append((int(fields[0]), fields[1], fields[2]))
        except OSError:
            pass
        return out

    def checkpoints(self):
        """[(time, name, release id or 'none')], oldest first."""
        out = []
        try:
            fd = os.open(os.path.join(self.dir, CHECKPOINTS), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return out
        with os.fdopen(fd, encoding="utf-8", errors="replace") as handle:
            for line in handle.read(1 << 20).splitlines():
                fields = line.split()
                if (len(fields) == 3 and fields[0].isdigit() and CHECKPOINT_NAME.match(fields[1])
                        and (fields[2] == "none" or ID.match(fields[2]))):
                    out.append((int(fields[0]), fields[1], fields[2]))
        return out

    def checkpoint(self, name):
        """The release recorded under NAME ('none' when no release was
        current), or None when there is no such checkpoint."""
        for _, which, rid in self.checkpoints():
            if which == name:
                return rid
        return None

    def entries(self):
        """The entry symlinks the last activation laid down."""
        try:
            with open(os.path.join(self.dir, ENTRIES), encoding="utf-8", errors="replace") as handle:
                return [line.strip() for line in handle if re.match(r"[A-Za-z0-9._-]+\Z", line.strip())]
        except OSError:
            return []

    def entries_wrong(self, entries):
        out = []
        for name in entries:
            want = f"{RELEASES}/{CURRENT}/{name}"
            if _readlink(os.path.join(self.root, name)) != want:
                out.append("%s/%s is not the symlink %s" % (self.root, name, want))
        return out

    # -- checking ------------------------------------------------------------
    def check(self, rid, expect=None, entries=()):
        """Check release RID as root would run it; returns its hashes and
        modes. EXPECT ({path: mode}): exactly these files, with these modes
        (a new release); without it, the manifest and modes it was made with.
        Every entry must be a file of the release."""
        if not ID.match(rid):
            raise Refused("%r is not a release id" % rid)
        files = self.files(rid)
        if expect is None:
            drift = self.drift(rid)
            if drift:
                raise Refused("release %s changed since it was made: %s" % (rid, "; ".join(drift)))
            expect = self.modes(rid)
        for rel, mode in sorted(expect.items()):
            if rel not in files:
                raise Refused("%s/%s/%s is missing" % (self.dir, rid, rel))
            if stat.S_IMODE(files[rel].st_mode) != mode:
                raise Refused("%s/%s/%s has mode %04o, not %04o"
                              % (self.dir, rid, rel, stat.S_IMODE(files[rel].st_mode), mode))
        for name in entries:
            if name not in files:
                raise Refused("%s/%s/%s is missing: %s/%s would point nowhere" % (self.dir, rid, name, self.root, name))
        for rel, st in sorted(files.items()):
            if rel not in expect:
                continue
            path = os.path.join(self.dir, rid, rel)
            python = rel.endswith(".py")
            if st.st_mode & 0o100:
                with open(path, "rb") as handle:
                    shebang = handle.readline()
                if shebang.startswith(b"#!/bin/bash"):
                    syntax = subprocess.run(["/bin/bash", "-n", path], stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, check=False)
                    if syntax.returncode != 0:
                        raise Refused("%s fails bash -n: %s" % (path, syntax.stdout.decode(errors="replace").strip()))
                python = python or shebang.startswith(b"#!/usr/bin/python3")
            if python:
                with open(path, "rb") as handle:
                    try:
                        compile(handle.read(), path, "exec")
                    except (SyntaxError, ValueError) as exc:
                        raise Refused("%s does not compile: %s" % (path, exc)) from exc
        return {rel: digest for rel, digest in self.hashes(rid, files).items() if rel in expect}, expect

    # -- changing ------------------------------------------------------------
    def _link(self, directory, name, target):
        """Point DIRECTORY/NAME at TARGET with one rename (atomic for
        anyone who opens it); returns whether it changed."""
        path = os.path.join(directory, name)
        if _readlink(path) == target:
            return False
        st = _lstat(path)
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise Refused("%s is a directory; it must be the symlink %s" % (path, target))
        tmp = os.path.join(directory, ".%s.%d.tmp" % (name, os.getpid()))
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        os.symlink(target, tmp)
        os.rename(tmp, path)
        _fsync(directory, directory=True)
        return True

    def _write(self, directory, name, text):
        """Replace DIRECTORY/NAME with TEXT in one rename, on disk first."""
        path = os.path.join(directory, name)
        tmp = os.path.join(directory, ".%s.%d.tmp" % (name, os.getpid()))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(tmp, path)

    def make(self, rid, hashes, modes):
        """Record RID's manifest, once every file of it is on disk."""
        top = os.path.join(self.dir, rid)
        for rel in hashes:
            _fsync(os.path.join(top, rel))
        for dirpath, _, _ in os.walk(top):
            _fsync(dirpath, directory=True)
        self._write(top, MODES, "".join("%04o  %s\n" % (modes[rel], rel) for rel in sorted(modes)))
        self._write(top, MANIFEST, "".join("%s  %s\n" % (hashes[rel], rel) for rel in sorted(hashes)))
        _fsync(top, directory=True)

    def bytecode(self, rid, expect):
        """{bytecode path: source path} for RID's Python files among EXPECT
        (the node program, which the entry points import): where this
        python3, the one a job end runs, looks for their bytecode. Empty on
        python 3.6, which has no hash-based .pyc: a job end then compiles the
        sources at each run."""
        if sys.version_info < (3, 7) or sys.implementation.cache_tag is None:
            return {}
        import importlib.util  # pylint: disable=import-outside-toplevel

        top = os.path.join(self.dir, rid)
        out = {}
        for rel in expect:
            if rel.endswith(".py"):
                pyc = os.path.relpath(importlib.util.cache_from_source(os.path.join(top, rel)), top)
                # (not under a pycache_prefix)
                if os.path.dirname(pyc) == os.path.join(os.path.dirname(rel), PYCACHE):
                    out[pyc] = rel
        return out

    def compile(self, rid, bytecode):
        """Write the BYTECODE (bytecode()) of RID unless the one there is
        valid: a checked-hash .pyc (PEP 552), which python uses only while
        it matches the source's hash, so a stale one is never run, and which
        holds no timestamp. Valid means its header and its whole code object
        are what the source compiles to now (a bit flipped past the header
        would pass python's own check and break every job end). It is in the
        manifest like every file of the release, and a job end never writes
        one (python3 -B)."""
        import importlib.util  # pylint: disable=import-outside-toplevel
        import marshal  # pylint: disable=import-outside-toplevel
        import py_compile  # pylint: disable=import-outside-toplevel

        top = os.path.join(self.dir, rid)
        for rel, source_rel in sorted(bytecode.items()):
            pyc, source = os.path.join(top, rel), os.path.join(top, source_rel)
            with open(source, "rb") as handle:
                text = handle.read()
            header = importlib.util.MAGIC_NUMBER + b"\x03\x00\x00\x00" + importlib.util.source_hash(text)
            try:
                code = compile(text, source, "exec", dont_inherit=True)
            except (SyntaxError, ValueError) as exc:
                raise Refused("%s does not compile: %s" % (source, exc)) from exc
            try:
                with open(pyc, "rb") as handle:
                    data = handle.read()
                valid = data[:len(header)] == header and marshal.loads(data[len(header):]) == code
            except (OSError, ValueError, EOFError, TypeError):
                valid = False
            os.makedirs(os.path.dirname(pyc), mode=0o755, exist_ok=True)
            os.chmod(os.path.dirname(pyc), 0o755)
            if not valid:
                try:
                    py_compile.compile(source, cfile=pyc, doraise=True,
                                       invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
                except py_compile.PyCompileError as exc:
                    raise Refused("%s does not compile: %s" % (source, exc.msg)) from exc
            os.chmod(pyc, 0o644)

    def tidy(self, rid, keep):
        """Remove what a crashed or interrupted lay-down left in RID beside
        the files KEEP (Salt's temporary copies, our own .tmp files): root's
        own leftovers in a root-only directory, which no runner runs (it
        runs only its own parts by name). KEEP is never empty."""
        if not keep:
            raise Refused("no list of the release's files: nothing tidied")
        top = os.path.join(self.dir, rid)
        removed = []
        for rel in sorted(self.files(rid)):
            if rel not in keep:
                os.unlink(os.path.join(top, rel))
                removed.append(rel)
        return removed

    def _record(self, action, rid):
        """Append to the history, best effort: the switch has happened."""
        lines = ["%d %s %s" % (when, what, which) for when, what, which in self.history()]
        lines.append("%d %s %s" % (int(time.time()), action, rid))
        try:
            self._write(self.dir, HISTORY, "\n".join(lines[-HISTORY_LINES:]) + "\n")
        except OSError:
            try:
                os.unlink(os.path.join(self.dir, ".%s.%d.tmp" % (HISTORY, os.getpid())))
            except OSError:
                pass

    def switch(self, rid, action):
        """Make RID current (the current one becomes previous); returns how
        long the switch of `current` itself took, in seconds, or None when
        RID was current already."""
        old = self.current()
        if old == rid:
            return None
        if old is not None:
            self._link(self.dir, "previous", old)
        started = time.perf_counter()
        self._link(self.dir, CURRENT, rid)
        took = time.perf_counter() - started
        self._record(action, rid)
        return took

    def prune(self, keep, grace):
        """Remove releases beyond the KEEP most recently current ones,
        never current or previous, and only those not current for GRACE s
        (a job end that started on one may still be running it)."""
        now = time.time()
        active, left = {}, {}
        history = self.history()
        for i, (when, _, rid) in enumerate(history):
            active[rid] = when
            left[rid] = history[i + 1][0] if i + 1 < len(history) else now
        current, previous = self.current(), self.previous()
        names = sorted(name for name in os.listdir(self.dir) if ID.match(name))
        for name in names:
            if name not in active:
                st = _lstat(os.path.join(self.dir, name))
                active[name] = left[name] = st.st_mtime if st else 0
        if current in active:
            left[current] = now
        # only releases that were made current count towards KEEP; one that
        # never was (its checks failed) goes once it is GRACE s old
        made = [name for name in names if os.path.exists(os.path.join(self.dir, name, MANIFEST))]
        ranked = sorted(made, key=lambda name: active[name], reverse=True)
        # and the releases the last KEEP checkpoints name: what a rollout's
        # rollback returns to
        checkpointed = {rid for _, _, rid in self.checkpoints()[-max(keep, 2):] if ID.match(rid)}
        kept = {current, previous} | set(ranked[:max(keep, 2)]) | checkpointed
        pruned = []
        for name in names:
            if name in kept or now - left[name] < grace:
                continue
            trash = os.path.join(self.dir, ".%s.%d.pruned" % (name, os.getpid()))
            os.rename(os.path.join(self.dir, name), trash)
            pruned.append(name)
        # what this or an interrupted earlier prune set aside
        for name in os.listdir(self.dir):
            if name.endswith(".pruned") and name.startswith("."):
                shutil.rmtree(os.path.join(self.dir, name), ignore_errors=True)
        return pruned


def _lock(releases):
    _root_dir(releases.dir, "the releases directory")
    fd = os.open(os.path.join(releases.dir, ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def activate(releases, rid, expect, entries, keep, grace):
    report = {"result": False, "release": rid, "switched": False}
    if not expect:
        report["comment"] = "activate needs the release's files (--expect PATH:MODE ...)"
        return report
    lock = _lock(releases)
    old = None
    try:
        old = releases.current()
        # The state has just laid these files down from the templates: they
        # are the release. Leftovers beside them go, the whole is checked,
        # and the manifest records it, once every file is on disk (again
        # after a rollback or a repair: a power cut must not leave a
        # current release of empty files).
        recorded = releases.manifest(rid)
        bytecode = releases.bytecode(rid, expect)
        expect = dict(expect, **{rel: 0o644 for rel in bytecode})
        report["tidied"] = releases.tidy(rid, set(expect))
        releases.compile(rid, bytecode)
        hashes, modes = releases.check(rid, expect, entries=entries)
        releases.make(rid, hashes, modes)
        report["remade"] = recorded is not None and recorded != hashes
        took = releases.switch(rid, "deploy")
        report.update(switched=took is not None, previous=old if took is not None else releases.previous(),
                      manifest=hashes)
        if took is not None:
            report["switch_seconds"] = took
        report["entries_changed"] = [name for name in entries
                                     if releases._link(releases.root, name, f"{RELEASES}/{CURRENT}/{name}")]
        releases._write(releases.dir, ENTRIES, "".join(name + "\n" for name in entries))
        report["pruned"] = releases.prune(keep, grace)
    except (Refused, OSError, ValueError) as exc:
        report["switched"] = releases.current() == rid != old
        report["comment"] = "switched to %s, then: %s" % (rid, exc) if report["switched"] else str(exc)
        return report
    finally:
        os.close(lock)
    report["result"] = True
    return report


def is_current(releases, rid, entries):
    return (releases.current() == rid and not releases.entries_wrong(entries)
            and not releases.drift(rid))


def rollback(releases, test, to_checkpoint=None):
    report = {"result": False, "test": test, "release": None, "to": None, "switched": False}
    if to_checkpoint is not None:
        report["checkpoint"] = to_checkpoint
        if not CHECKPOINT_NAME.match(to_checkpoint):
            report["comment"] = "%r is not a checkpoint name; nothing changed" % to_checkpoint
            return report
    lock = None if test else _lock(releases)
    try:
        current, previous = releases.current(), releases.previous()
        if to_checkpoint is not None:
            previous = releases.checkpoint(to_checkpoint)
            report.update(release=current, to=previous)
            if previous is None:
                report["comment"] = "no checkpoint %s on this node: nothing changed" % to_checkpoint
                return report
            if previous == "none":
                report.update(to=None, comment="no release was current at checkpoint %s: nothing to roll back to "
                                               "(epilog.clean removes the chain); nothing changed" % to_checkpoint)
                return report
            if previous == current:
                report.update(result=True, comment="release %s, current at checkpoint %s, is current: nothing to do"
                                                   % (current, to_checkpoint))
                return report
        report.update(release=current, to=previous)
        if current is None and to_checkpoint is None:
            report["comment"] = "no release is current on this node (%s/current): nothing to roll back" % releases.dir
            return report
        if to_checkpoint is not None and not os.path.isdir(os.path.join(releases.dir, previous)):
            report["comment"] = ("release %s, current at checkpoint %s, is no longer on this node (pruned); nothing "
                                 "changed" % (previous, to_checkpoint))
            return report
        if previous is None or not os.path.isdir(os.path.join(releases.dir, previous)):
            report.update(to=None, comment="no release before %s on this node: nothing to roll back to; nothing "
                                           "changed" % current)
            return report
        releases.check(previous, entries=releases.entries())
        if test:
            report.update(result=True, comment="would switch from release %s to %s" % (current, previous))
            return report
        took = releases.switch(previous, "rollback")
    except (Refused, OSError, ValueError) as exc:
        if report["release"] is not None and releases.current() not in (None, report["release"]):
            report.update(result=True, switched=True, comment="switched from release %s to %s, then: %s"
                          % (report["release"], releases.current(), exc))
        else:
            report["comment"] = "%s; nothing changed" % exc
        return report
    finally:
        if lock is not None:
            os.close(lock)
    report.update(result=True, switched=True, switch_seconds=took,
                  comment="switched from release %s to %s; a second rollback switches back" % (current, previous))
    return report


def checkpoint(releases, name, test):
    """Record the current release under NAME, unless NAME is recorded."""
    report = {"result": False, "test": test, "checkpoint": name, "recorded": False}
    if not CHECKPOINT_NAME.match(name):
        report["comment"] = ("%r is not a checkpoint name (a letter, then up to 63 letters, digits and . _ -)"
                             % name)
        return report
    lock = None if test else _lock(releases)
    try:
        current = releases.current()
        known = releases.checkpoint(name)
        report["release"] = current
        if known is not None:
            report.update(result=True, release=None if known == "none" else known,
                          comment="checkpoint %s was recorded before (release %s); kept" % (name, known))
            return report
        if test:
            report.update(result=True, comment="would record checkpoint %s: release %s" % (name, current))
            return report
        lines = ["%d %s %s" % item for item in releases.checkpoints()]
        lines.append("%d %s %s" % (int(time.time()), name, current or "none"))
        releases._write(releases.dir, CHECKPOINTS, "\n".join(lines[-CHECKPOINT_LINES:]) + "\n")
        report.update(result=True, recorded=True, comment="checkpoint %s: release %s" % (name, current))
    finally:
        if lock is not None:
            os.close(lock)
    return report


def status(releases, entries):
    current = releases.current()
    report = {"release": current, "previous": releases.previous(), "problems": [],
              "releases": sorted(name for name in os.listdir(releases.dir) if ID.match(name))
              if os.path.isdir(releases.dir) else [], "history": releases.history()[-10:]}
    # Each problem opens with its code (epilog.verify passes them on; the
    # codes are listed in docs/releases.md)
    if current is None:
        report["problems"].append("[release-none-current] no release is current (%s/current)" % releases.dir)
        return report
    try:
        report["manifest"] = releases.manifest(current)
        if report["manifest"] is not None:
            # one digest of the whole content: equal on every node whose
            # files are equal, whatever the id. The bytecode aside: it is the
            # node's python3's compilation of a source that is in it (and
            # python runs it only while it matches that source).
            report["content"] = hashlib.sha256("".join(
                "%s  %s\n" % (digest, rel) for rel, digest in sorted(report["manifest"].items())
                if PYCACHE not in rel.split("/")).encode()).hexdigest()
        if report["manifest"] is None or releases.modes(current) is None:
            report["problems"].append("[release-manifest-missing] release %s has no manifest %s/%s"
                                      % (current, MANIFEST, MODES))
        else:
            report["problems"].extend("[release-drift] " + line for line in releases.drift(current))
    except (Refused, OSError, ValueError) as exc:
        report["problems"].append("[release-unreadable] %s" % exc)
    report["problems"].extend("[entry-not-symlink] " + line for line in releases.entries_wrong(entries))
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(prog="release.py")
    parser.add_argument("--root", required=True)
    sub = parser.add_subparsers(dest="command")
    act = sub.add_parser("activate")
    act.add_argument("release")
    act.add_argument("--expect", action="append", default=[])
    act.add_argument("--entry", action="append", default=[])
    act.add_argument("--keep", type=int, default=5)
    act.add_argument("--grace", type=int, default=300)
    cur = sub.add_parser("is-current")
    cur.add_argument("release")
    cur.add_argument("--entry", action="append", default=[])
    back = sub.add_parser("rollback")
    back.add_argument("--test", action="store_true")
    back.add_argument("--to-checkpoint")
    point = sub.add_parser("checkpoint")
    point.add_argument("name")
    point.add_argument("--test", action="store_true")
    stat_ = sub.add_parser("status")
    stat_.add_argument("--entry", action="append", default=[])
    args = parser.parse_args(argv)
    releases = Releases(args.root)
    try:
        if args.command == "activate":
            expect = {}
            for item in args.expect:
                rel, _, mode = item.rpartition(":")
                expect[rel] = int(mode, 8)
            report = activate(releases, args.release, expect, args.entry, args.keep, args.grace)
        elif args.command == "is-current":
            try:
                return 0 if is_current(releases, args.release, args.entry) else 1
            except (Refused, OSError, ValueError):
                return 1
        elif args.command == "rollback":
            report = rollback(releases, args.test, args.to_checkpoint)
        elif args.command == "checkpoint":
            report = checkpoint(releases, args.name, args.test)
        elif args.command == "status":
            report = status(releases, args.entry or releases.entries())
        else:
            parser.error("a command is required")
    except Exception as exc:  # noqa: BLE001 - one JSON answer, whatever went wrong
        report = {"result": False, "switched": False, "comment": "%s: %s" % (type(exc).__name__, exc)}
    json.dump(report, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0 if report.get("result", True) else 1


if __name__ == "__main__":
    sys.exit(main())
