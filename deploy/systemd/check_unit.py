"""Checks deploy/systemd: `systemd-analyze verify` on the unit, `systemd-sysusers --dry-run` on the
user it runs as, and the service policy docs/operations.md promises.

systemd-analyze refuses a unit whose commands do not exist, so the unit is verified as a copy in a
temporary root where every absolute command path it names (under /opt/q38/current) exists as an
executable stub; nothing else is changed. Its exit status alone is not enough (an unknown key or a
bad value is only a warning), so any diagnostic fails the check.

usage: check_unit.py --systemd-analyze PATH --systemd-sysusers PATH
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from check_report import report  # noqa: E402

UNIT = os.path.join(HERE, "q38-server.service")
SYSUSERS = os.path.join(HERE, "q38.sysusers.conf")
BUNDLE = "/opt/q38/current"
LOOPBACK_HOSTS = {"127.0.0.1", "[::1]", "localhost"}
# What q38-server spends after the drain deadline before it exits: cancelling (5 s), stopping the
# workers (5 s), stopping the gRPC server (2 s) (server/server_main.cc).
STOP_AFTER_DRAIN_S = 12


def parse_unit(text):
    """{section: {key: [values]}}, with backslash continuations joined."""
    sections, current = {}, None
    text = re.sub(r"\\\n\s*", " ", text)
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def analyze_verify(tool, text):
    """Diagnostics of `systemd-analyze verify` for the unit, with its commands stubbed."""
    with tempfile.TemporaryDirectory() as root:
        staged = text.replace(BUNDLE, root + BUNDLE)
        for command in re.findall(r"^Exec\w+=[-@:+!]*(\S+)", staged, re.M):
            os.makedirs(os.path.dirname(command), exist_ok=True)
            with open(command, "w") as f:
                f.write("#!/bin/sh\n")
            os.chmod(command, 0o755)
        path = os.path.join(root, "q38-server.service")
        with open(path, "w") as f:
            f.write(staged)
        run = subprocess.run([tool, "verify", "--man=no", "--generators=no", path],
                             capture_output=True, text=True, cwd=root)
        return run.returncode, (run.stdout + run.stderr).strip()


def sysusers_dry_run(tool):
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "etc"))
        run = subprocess.run([tool, "--dry-run", "--root=" + root, SYSUSERS],
                             capture_output=True, text=True)
        return run.returncode, (run.stdout + run.stderr).strip()


def seconds(value):
    m = re.fullmatch(r"(\d+)\s*(s|min)?", value)
    if not m:
        raise ValueError("not a plain duration: " + value)
    return int(m.group(1)) * (60 if m.group(2) == "min" else 1)


def policy_problems(unit, sysusers_text):
    """Every way the unit departs from the documented policy."""
    service = unit.get("Service", {})
    one = lambda key: (service.get(key) or [""])[-1]
    env = {}
    for value in service.get("Environment", []):
        for assignment in shlex.split(value):
            name, _, v = assignment.partition("=")
            env[name] = v
    problems = []

    pre = [shlex.split(v) for v in service.get("ExecStartPre", [])]
    if [BUNDLE + "/bin/q38", "bundle", "verify", BUNDLE] not in pre:
        problems.append("ExecStartPre does not run `q38 bundle verify` on " + BUNDLE)
    start = shlex.split(one("ExecStart"))
    if not start or start[0] != BUNDLE + "/bin/q38-server" or "--bundle=" + BUNDLE not in start:
        problems.append("ExecStart does not run the bundle's q38-server with --bundle=" + BUNDLE)
    if env.get("LD_LIBRARY_PATH") != BUNDLE + "/lib":
        problems.append("LD_LIBRARY_PATH is not the bundle's lib/")
    for flag, var in (("--listen", "Q38_LISTEN"), ("--metrics", "Q38_METRICS"),
                      ("--drain_timeout_s", "Q38_DRAIN_TIMEOUT_S")):
        if "%s=${%s}" % (flag, var) not in start:
            problems.append("ExecStart does not pass %s=${%s}" % (flag, var))
    for var in ("Q38_LISTEN", "Q38_METRICS"):
        host = env.get(var, "").rpartition(":")[0]
        if host not in LOOPBACK_HOSTS:
            problems.append("%s defaults to %r, not a loopback address" % (var, env.get(var)))

    if one("KillSignal") != "SIGTERM":
        problems.append("KillSignal is not SIGTERM")
    if one("KillMode") != "mixed":
        problems.append("KillMode is not mixed (the workers would get SIGTERM before the drain)")
    drain = int(env.get("Q38_DRAIN_TIMEOUT_S", "0"))
    if seconds(one("TimeoutStopSec") or "0") <= drain + STOP_AFTER_DRAIN_S:
        problems.append("TimeoutStopSec is not longer than the drain deadline plus %d s"
                        % STOP_AFTER_DRAIN_S)

    if one("Restart") != "on-failure":
        problems.append("Restart is not on-failure")
    prevented = set(" ".join(service.get("RestartPreventExitStatus", [])).split())
    wanted = {"1", "3", "5", "6", "7"} | {str(c) for c in range(20, 27)}  # common/exit_codes.h
    if prevented != wanted:
        problems.append("RestartPreventExitStatus is %s, not %s" % (sorted(prevented), sorted(wanted)))

    user = one("User")
    if user in ("", "root", "0"):
        problems.append("the service runs as root")
    elif not re.search(r"^u\s+%s\s" % re.escape(user), sysusers_text, re.M):
        problems.append("q38.sysusers.conf does not create the user %r" % user)
    if one("LimitMEMLOCK") != "infinity":
        problems.append("LimitMEMLOCK is not infinity (pinned host memory)")
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--systemd-analyze", required=True)
    parser.add_argument("--systemd-sysusers", required=True)
    args = parser.parse_args()
    with open(UNIT) as f:
        text = f.read()
    with open(SYSUSERS) as f:
        sysusers_text = f.read()
    found = []
    rc, out = analyze_verify(args.systemd_analyze, text)
    if rc != 0 or out:
        found.append("systemd-analyze verify: exit %d: %s" % (rc, out))
    rc, out = sysusers_dry_run(args.systemd_sysusers)
    if rc != 0:
        found.append("systemd-sysusers --dry-run: exit %d: %s" % (rc, out))
    found += ["policy: " + p for p in policy_problems(parse_unit(text), sysusers_text)]
    return report(found, "systemd-analyze verify, systemd-sysusers --dry-run, the unit's policy")


if __name__ == "__main__":
    sys.exit(main())
