"""tools/slurm_local.sh leaves a machine's own Slurm alone, and `make test` never calls it.

The script's start and stop run against a scratch machine: SLURM_LOCAL_DIR and SLURM_LOCAL_ETC
(where it looks for a site's slurm.conf) under tmp_path, and a PATH of stand-ins for Debian's
slurmd, slurmctld, munged, sinfo, sbatch and apt-get (and for pkill and killall, which it must never
call), each appending how it was called to a log. A stand-in daemon starts a real process under
the daemon's name (a copy of sleep) and writes its pid where it was told, as the real ones do.
pgrep is the real one, limited to this test's own processes, so a machine with a real Slurm up
sees only these. The real daemons run in the Slurm tier (tests/e2e/test_slurm.py).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from testpaths import ROOT

SCRIPT = ROOT / "tools" / "slurm_local.sh"
TIER = ROOT / "tests" / "e2e" / "test_slurm.py"
# what the script may run besides the stand-ins (linked into the scratch PATH)
TOOLS = ("bash", "cat", "chmod", "dd", "dirname", "grep", "head", "mkdir", "readlink", "rm")
TOOLS += ("sed", "seq", "sleep")
# Debian's paths for what a site's Slurm keeps under /etc: the script must not write them
SITE_FILES = (Path("/etc/slurm/slurm.conf"), Path("/etc/munge/munge.key"))

DAEMON = """#!/usr/bin/env bash
# {name}: records its call; a real process named {name} (a copy of sleep), its pid in {pid_from}
echo "{name} SLURM_CONF=${{SLURM_CONF-}} $*" >> {calls}
{body}
[[ -n "$pidfile" ]] || {{ echo "{name}: no pid file given" >&2; exit 1; }}
{daemons}/{name} 600 </dev/null >/dev/null 2>&1 &
echo $! > "$pidfile"
"""
SLURM_PIDFILE = """[[ "$1" == -C ]] && {{ echo "NodeName=node1 CPUs=2 RealMemory=1000"; exit 0; }}
conf=""
while (($#)); do [[ "$1" == -f ]] && conf="$2"; shift; done
[[ -f "$conf" ]] || {{ echo "{name}: no -f slurm.conf" >&2; exit 1; }}
pidfile="$(sed -n 's/^{key}=//p' "$conf")"
"""
MUNGED_PIDFILE = """pidfile=""
for arg; do [[ "$arg" == --pid-file=* ]] && pidfile="${arg#--pid-file=}"; done
"""
SINFO = """#!/usr/bin/env bash
echo "sinfo SLURM_CONF=${SLURM_CONF-} $*" >> CALLS
case "$*" in
  *%t*%c*) echo "node1 idle 2 1000" ;;
  *%t*) echo idle ;;
  *%c*) echo "2 CPUs, 1000 MB" ;;
esac
"""
PGREP = """#!/usr/bin/env bash
# the real pgrep, limited to processes whose executable lies under this test's directory
{real} "$@" | while read -r pid; do
  [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == {tmp}/* ]] && echo "$pid"
done
exit 0
"""


class Machine:
    """A scratch machine for the script: its stand-ins, its /etc, its SLURM_LOCAL_DIR."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.bin, self.etc, self.local = tmp / "bin", tmp / "etc", tmp / "local"
        self.daemons, self.foreign = tmp / "daemons", tmp / "foreign"
        self.calls = tmp / "calls"
        for folder in (self.bin, self.etc, self.daemons, self.foreign):
            folder.mkdir()
        for tool in TOOLS:
            (self.bin / tool).symlink_to(shutil.which(tool))
        sleep = shutil.which("sleep")
        for name in ("slurmctld", "slurmd", "munged", "slurmdbd"):
            shutil.copy(sleep, self.daemons / name)
            shutil.copy(sleep, self.foreign / name)
        fmt = {"calls": self.calls, "daemons": self.daemons}
        self._script("id", "echo 0")  # root, as the script asks for
        for name in ("sbatch", "apt-get", "pkill", "killall"):
            self._script(name, f'echo "{name} $*" >> {self.calls}')
        for name, key in (("slurmctld", "SlurmctldPidFile"), ("slurmd", "SlurmdPidFile")):
            body = SLURM_PIDFILE.format(name=name, key=key)
            self._script(name, DAEMON.format(name=name, pid_from=key, body=body, **fmt))
        self._script(
            "munged",
            DAEMON.format(name="munged", pid_from="--pid-file", body=MUNGED_PIDFILE, **fmt),
        )
        self._script("sinfo", SINFO.replace("CALLS", str(self.calls)))
        self._script("pgrep", PGREP.format(real=shutil.which("pgrep"), tmp=tmp))
        self.started: list[subprocess.Popen] = []

    def _script(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text(body if body.startswith("#!") else f"#!/usr/bin/env bash\n{body}\n")
        path.chmod(0o755)

    def run(self, command: str) -> subprocess.CompletedProcess:
        env = {
            "PATH": str(self.bin),
            "HOME": str(self.tmp),
            "SLURM_LOCAL_DIR": str(self.local),
            "SLURM_LOCAL_ETC": str(self.etc),
        }
        bash = shutil.which("bash")
        return subprocess.run(
            [bash, str(SCRIPT), command], env=env, capture_output=True, text=True, timeout=60
        )

    def calls_of(self, name: str) -> list[str]:
        lines = self.calls.read_text().splitlines() if self.calls.exists() else []
        return [ln for ln in lines if ln.split(" ", 1)[0] == name]

    def start_foreign(self, name: str) -> subprocess.Popen:
        """A process named `name` that the script did not start (a site's daemon)."""
        proc = subprocess.Popen([str(self.foreign / name), "600"])
        self.started.append(proc)
        return proc

    def own_pids(self) -> dict[str, int]:
        run = self.local / "run"
        return {p.stem: int(p.read_text()) for p in sorted(run.glob("*.pid"))}

    def kill_leftovers(self) -> None:
        """Every process this test started (their executables lie under tmp), by pid."""
        for proc in self.started:
            proc.kill()
            proc.wait()
        for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                continue
            if exe.startswith(f"{self.tmp}/"):
                os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """The process is there and not a zombie (pid 1 of a container may never reap one)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(") ", 1)[1][0] != "Z"


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under root, a file with its content."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
        for p in sorted(root.rglob("*"))
    }


def _site_files() -> list[tuple[str, float | None]]:
    return [(str(p), p.stat().st_mtime if p.exists() else None) for p in SITE_FILES]


@pytest.fixture
def machine(tmp_path):
    scratch = Machine(tmp_path)
    site_before = _site_files()
    yield scratch
    scratch.kill_leftovers()
    assert _site_files() == site_before  # the real /etc/slurm and /etc/munge untouched


def test_a_clean_start_writes_only_under_its_own_directory_and_uses_only_its_own_files(machine):
    started = machine.run("start")
    assert started.returncode == 0, started.stderr
    conf = machine.local / "slurm.conf"
    assert started.stdout.splitlines()[-1] == f"SLURM_CONF={conf}"
    assert _tree(machine.etc) == {}  # its /etc: nothing written
    # every path the configuration names lies in its own directory
    paths = re.findall(r"=(/[^\s,]+)", conf.read_text())
    assert len(paths) == 7 and all(p.startswith(f"{machine.local}/") for p in paths), paths
    assert f"AuthInfo=cred_expire=10,socket={machine.local}/run/munge.socket" in conf.read_text()
    # munged on its own key, socket, pid file, log and seed
    (munged,) = machine.calls_of("munged")
    for flag, path in (
        ("--socket", "run/munge.socket"),
        ("--key-file", "munge/munge.key"),
        ("--pid-file", "run/munged.pid"),
        ("--log-file", "log/munged.log"),
        ("--seed-file", "munge/munged.seed"),
    ):
        assert f" {flag}={machine.local}/{path}" in munged, munged
    key = machine.local / "munge" / "munge.key"
    assert key.stat().st_size == 1024 and key.stat().st_mode & 0o777 == 0o400
    # Slurm's daemons and sinfo on its own configuration, by -f and by SLURM_CONF
    for name in ("slurmctld", "slurmd"):
        assert f"{name} SLURM_CONF={conf} -c -f {conf}" in machine.calls_of(name)
    assert machine.calls_of("sinfo") and all(
        c.startswith(f"sinfo SLURM_CONF={conf} ") for c in machine.calls_of("sinfo")
    )
    assert machine.calls_of("pkill") == machine.calls_of("killall") == []
    assert machine.calls_of("apt-get") == []  # slurmd, munged... found: nothing installed
    assert sorted(machine.own_pids()) == ["munged", "slurmctld", "slurmd"]
    assert all(_running(pid) for pid in machine.own_pids().values())


@pytest.mark.parametrize("conf", ["slurm/slurm.conf", "slurm-llnl/slurm.conf"])
def test_a_sites_slurm_conf_is_refused_before_anything_is_installed_or_written(machine, conf):
    site = machine.etc / conf
    site.parent.mkdir()
    site.write_text("ClusterName=site\n")
    (machine.bin / "sbatch").unlink(missing_ok=True)  # nothing installed yet: it would apt-get
    before = _tree(machine.etc)
    refused = machine.run("start")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith(f"tools/slurm_local.sh: {site} exists: ")
    assert _tree(machine.etc) == before and not machine.local.exists()
    assert not machine.calls.exists()  # no apt-get, no daemon, no sinfo


@pytest.mark.parametrize("name", ["slurmctld", "slurmd", "munged", "slurmdbd"])
def test_a_daemon_it_did_not_start_is_refused_and_left_running(machine, name):
    foreign = machine.start_foreign(name)
    refused = machine.run("start")
    assert refused.returncode == 2, refused.stderr
    assert f"a {name} it did not start is running (pid {foreign.pid})" in refused.stderr
    assert not machine.local.exists() and not machine.calls.exists()
    assert machine.run("stop").returncode == 0
    assert foreign.poll() is None and not machine.calls.exists()


def test_a_start_beside_its_own_daemons_restarts_them(machine):
    assert machine.run("start").returncode == 0
    first = machine.own_pids()
    again = machine.run("start")
    assert again.returncode == 0, again.stderr
    second = machine.own_pids()
    assert not any(_running(pid) for pid in first.values())
    assert sorted(second) == sorted(first) and set(second.values()).isdisjoint(first.values())
    assert machine.calls_of("pkill") == machine.calls_of("killall") == []


def test_stop_signals_only_the_pids_it_recorded_under_their_names(machine):
    assert machine.run("start").returncode == 0
    own = machine.own_pids()
    bystanders = [machine.start_foreign(name) for name in ("slurmctld", "slurmd", "munged")]
    # a pid file whose pid now belongs to another program (a reused pid) is not signalled
    reused = subprocess.Popen([shutil.which("sleep"), "600"])
    machine.started.append(reused)
    stopped = machine.run("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not any(_running(pid) for pid in own.values())
    assert all(proc.poll() is None for proc in bystanders)
    assert not list((machine.local / "run").glob("*.pid"))
    (machine.local / "run" / "slurmd.pid").write_text(f"{reused.pid}\n")
    assert machine.run("stop").returncode == 0 and reused.poll() is None
    assert machine.calls_of("pkill") == machine.calls_of("killall") == []


def _tier_tests() -> list[str]:
    """The tests of tests/e2e/test_slurm.py that take the `slurm` fixture (a running Slurm)."""
    tree = ast.parse(TIER.read_text())
    return [
        f"{TIER.relative_to(ROOT)}::{node.name}"
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and "slurm" in [a.arg for a in node.args.args]
    ]


def test_the_default_run_skips_the_slurm_tier_without_calling_slurm_local(tmp_path):
    """pytest without HYRL_SLURM (as `make test` runs it; CI=true alone does not opt in): a
    stand-in bash records any call of tools/slurm_local.sh, stand-ins for Slurm's and munge's
    commands and apt-get record theirs."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    bash = shutil.which("bash")
    (bin_dir / "bash").write_text(
        f'#!{bash}\nfor a; do [[ "$a" == *slurm_local.sh ]] && {{ echo "bash $*" >> {calls}; '
        f'exit 97; }}; done\nexec {bash} "$@"\n'
    )
    for name in ("sinfo", "sbatch", "slurmctld", "slurmd", "munged", "apt-get", "pkill"):
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\nexit 1\n')
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("HYRL_SLURM", "SLURM_CONF") and not k.startswith("PYTEST_")
    }
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", CI="true")
    tests = _tier_tests()
    assert len(tests) == 4
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *tests],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert not calls.exists(), calls.read_text()
    assert run.returncode == 0 and f"{len(tests)} skipped" in run.stdout, run.stdout[-3000:]
    assert run.stdout.count("the Slurm tier runs only when asked: make slurm-test") == len(tests)
