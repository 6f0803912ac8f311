"""Build the Docker sandbox image from local files only (no registry), for ``make_pool("docker")``.

    medagentgym sandbox-image [--image medagentgym-sandbox:latest] [--userland host|debootstrap]

Writes two local images: ``medagentgym-sandbox-base:<inputs hash>`` (a root filesystem assembled from this
host and this venv, see ``sandbox/docker_image.py``; reused while its inputs are unchanged) and ``--image``
(``sandbox/Dockerfile`` on top of it: the ``sandbox`` package). Then it starts one container of the image to
check that Python imports the worker and every task library, and prints what it built, its size and how long
each step took (``--json``: one JSON line). Needs a running docker engine (``scripts/with_dockerd.sh`` starts a
private one) and root (the root filesystem holds root-owned files). Ctrl-C says whether the base image was
finished (a rerun reuses it), exit 130.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from medagentgym.sandbox import docker_image as di
from medagentgym.sandbox.docker_backend import DEFAULT_IMAGE

BASE_REPO = "medagentgym-sandbox-base"
SANDBOX_DIR = Path(di.__file__).resolve().parent  # the sandbox package: holds the Dockerfile (package data)
CHECK = ("import sys; sys.path.insert(0, '/opt/medagentgym'); import numpy, pandas, scipy.stats, "
         "sklearn.linear_model, statsmodels.api, lifelines, Bio, matplotlib.pyplot, pyseccomp, sqlite3, "
         "medagentgym.sandbox.worker, medagentgym.sandbox.grounding; print(sys.version.split()[0], numpy.__version__, pandas.__version__)")


def docker(*args: str, stdin=None, check: bool = True) -> subprocess.CompletedProcess:
    """Run the docker CLI; a failure raises with its last stderr line."""
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}  # the classic builder: no buildx plugin is needed
    proc = subprocess.run(["docker", *args], stdin=stdin, capture_output=True, text=True, env=env, check=False)
    if check and proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise RuntimeError(f"`docker {' '.join(args[:2])} ...` failed: {last}")
    return proc


def image_exists(name: str) -> bool:
    return docker("image", "inspect", name, check=False).returncode == 0


def build_base(userland: str, workdir: Path, timings: dict) -> tuple[str, dict]:
    """Assemble the root filesystem and ``docker import`` it, unless an image of the same inputs exists."""
    start = time.monotonic()
    dists = di.distribution_closure()
    files = di.python_files(dists)
    if userland == "host":
        files.update(di.userland_files())
    tag = f"{BASE_REPO}:{di.inputs_digest(files, userland)}"
    info = {"distributions": {d.metadata["Name"]: d.version for d in dists}, "base": tag, "base_reused": True}
    timings["plan_s"] = time.monotonic() - start
    if image_exists(tag):
        return tag, info
    info["base_reused"] = False
    rootfs = Path(tempfile.mkdtemp(prefix="sandbox-rootfs-", dir=workdir))
    try:
        start = time.monotonic()
        if userland == "debootstrap":
            di.debootstrap(rootfs)
        timings["userland_s"] = time.monotonic() - start
        start = time.monotonic()
        provided = [Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()]
        files.update(di.library_closure(files, provided))
        di.materialize(files, rootfs)
        di.base_files(rootfs)
        timings["rootfs_s"] = time.monotonic() - start
        info["rootfs_mb"] = round(sum(f.stat().st_size for f in rootfs.rglob("*")
                                      if f.is_file() and not f.is_symlink()) / 2**20, 1)
        info["rootfs_files"] = len(files)
        start = time.monotonic()
        tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        docker("import", "--change", f"ENV PATH={di.PREFIX}/bin:/usr/bin:/bin", "--change", "ENV LANG=C.UTF-8",
               "-", tag, stdin=tar.stdout)
        if tar.wait() != 0:
            raise RuntimeError("tar of the root filesystem failed")
        timings["import_s"] = time.monotonic() - start
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(rootfs)], check=False)
    for line in docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", BASE_REPO).stdout.split():
        if line != tag:  # older bases of this repository: their inputs changed
            docker("image", "rm", line, check=False)
    return tag, info


def main(argv: list[str] | None = None) -> int:
    """Parse flags, build, check, print; return the exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image", default=DEFAULT_IMAGE, help=f"name of the image to build (default {DEFAULT_IMAGE})")
    p.add_argument("--userland", choices=("host", "debootstrap"), default="host",
                   help="where the image's shell tools and libc come from: this host's Debian packages "
                        "(default: seconds, offline) or debootstrap --variant=minbase (minutes, needs a mirror)")
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()),
                   help="scratch folder for the root filesystem (needs ~1 GB free; removed afterwards)")
    p.add_argument("--json", action="store_true", help="end stdout with one JSON line describing the build")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        p.error("run as root: the image's files must be owned by root (e.g. sudo .venv/bin/python ...)")
    if sys.prefix == sys.base_prefix:
        p.error("run with the project's venv interpreter (.venv/bin/python): its site-packages are copied")
    timings: dict[str, float] = {}
    total = time.monotonic()
    base = None
    try:
        base, info = build_base(args.userland, args.workdir, timings)
        start = time.monotonic()
        old = docker("image", "inspect", "--format", "{{.Id}}", args.image, check=False).stdout.strip()
        docker("build", "--network", "none", "--build-arg", f"BASE={base}", "-f",
               str(SANDBOX_DIR / "Dockerfile"), "-t", args.image, str(SANDBOX_DIR))
        if old and old != docker("image", "inspect", "--format", "{{.Id}}", args.image).stdout.strip():
            docker("image", "rm", old, check=False)  # the previous build, now untagged
        timings["build_s"] = time.monotonic() - start
        start = time.monotonic()
        versions = docker("run", "--rm", "--pull", "never", "--network", "none", "--read-only", "--tmpfs", "/tmp",
                          "--workdir", "/",
                          args.image, "python", "-I", "-c", CHECK).stdout.split()
        timings["check_s"] = time.monotonic() - start
    except (RuntimeError, LookupError, OSError) as exc:
        print(f"build_sandbox_image: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        kept = f"the base image {base} is built (a rerun reuses it)" if base else "no base image was finished"
        print(f"\ninterrupted: {kept}; {args.image} may not be updated; rerun the same command", file=sys.stderr)
        return 130
    size = int(docker("image", "inspect", "--format", "{{.Size}}", args.image).stdout.strip())
    info.update(image=args.image, userland=args.userland, image_mb=round(size / 2**20, 1),
                python=versions[0], numpy=versions[1], pandas=versions[2], platform=sysconfig.get_platform(),
                seconds={k: round(v, 2) for k, v in timings.items()}, total_s=round(time.monotonic() - total, 2))
    print(f"built {args.image} ({info['image_mb']} MB, base {base}{' reused' if info['base_reused'] else ''}, "
          f"Python {versions[0]}, numpy {versions[1]}, pandas {versions[2]}) in {info['total_s']} s", file=sys.stderr)
    if args.json:
        print(json.dumps(info, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
