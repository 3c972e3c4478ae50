# SPDX-License-Identifier: Apache-2.0
"""test_install: `make install`'s layout, installed into a DESTDIR from the test build
(`cmake --install`, the step `make install` runs): the binaries under PREFIX/sbin,
/etc/roomd/roomd.yaml (kept when an operator edited it), the systemd unit (Type=notify,
WatchdogSec, paths of this PREFIX), the logrotate file (SIGHUP, no copytruncate) and the
man pages roomd(8) and roomctl(8) (groff reports no warning). The installed config loads
and, pointed at writable directories, passes --check-config."""
import os
import re
import shutil
import subprocess
import tempfile

from roomd_test import BUILD, SOURCE, run

TMP = tempfile.mkdtemp(prefix="roomd-install-")


def cache(name):
    with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split("=", 1)[1].strip()
    raise AssertionError(f"{name} not in CMakeCache.txt")


PREFIX = cache("CMAKE_INSTALL_PREFIX")
SYSCONF = cache("ROOMD_SYSCONFDIR")


def install(destdir):
    p = subprocess.run(["cmake", "--install", BUILD], env=dict(os.environ, DESTDIR=destdir),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def at(destdir, path):
    return os.path.join(destdir, path.lstrip("/"))


def test_layout_and_files():
    d = os.path.join(TMP, "root")
    install(d)
    for b in ("roomd", "roomctl", "roomd_consumer"):
        exe = at(d, f"{PREFIX}/sbin/{b}")
        assert os.access(exe, os.X_OK), exe
        p = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10)
        assert p.returncode == 0 and p.stdout.startswith(b + " "), p
    for m in ("roomd.8", "roomctl.8", "roomd_consumer.8"):
        page = at(d, f"{PREFIX}/share/man/man8/{m}")
        p = subprocess.run(["groff", "-man", "-ww", "-z", page], capture_output=True, text=True)
        assert p.returncode == 0 and p.stderr == "", (m, p.stderr)
    with open(at(d, f"{PREFIX}/lib/systemd/system/roomd.service")) as f:
        unit = f.read()
    assert re.search(r"^Type=notify$", unit, re.M), unit
    assert re.search(r"^WatchdogSec=\d+", unit, re.M), unit
    assert f"ExecStart={PREFIX}/sbin/roomd -c {SYSCONF}/roomd/roomd.yaml\n" in unit, unit
    assert "ExecReload=/bin/kill -HUP $MAINPID" in unit, unit
    assert not re.search(r"@[A-Z_]+@", unit), "unsubstituted @VAR@ in the unit"
    with open(at(d, f"{PREFIX}/lib/sysusers.d/roomd.conf")) as f:
        assert re.search(r"^u roomd - .* /var/lib/roomd ", f.read(), re.M)
    assert os.path.isfile(at(d, f"{PREFIX}/share/roomd/roomd.env.example"))
    with open(at(d, f"{SYSCONF}/logrotate.d/roomd")) as f:
        rot = f.read()
    assert "HUP" in rot and "copytruncate" not in rot.replace("No copytruncate", ""), rot


def test_config_loads_and_survives_reinstall():
    d = os.path.join(TMP, "root2")
    install(d)
    cfg = at(d, f"{SYSCONF}/roomd/roomd.yaml")
    roomd = at(d, f"{PREFIX}/sbin/roomd")
    with open(cfg) as f:
        text = f.read()
    # as shipped it names /var/lib/roomd and /var/log/roomd: only those can be missing here
    p = subprocess.run([roomd, "--check-config", cfg], capture_output=True, text=True)
    problems = [x for x in p.stderr.splitlines()[1:] if x]
    assert all("/var/lib/roomd" in x or "/var/log/roomd" in x for x in problems), p.stderr
    # pointed at directories that exist it passes
    for sub in ("lib", "log"):
        os.makedirs(os.path.join(d, "var", sub, "roomd"), exist_ok=True)
    local = os.path.join(TMP, "local.yaml")
    with open(local, "w") as f:
        f.write(text.replace("/var/", os.path.join(d, "var") + "/"))
    p = subprocess.run([roomd, "--check-config", local], capture_output=True, text=True)
    assert p.returncode == 0 and f"{local}: ok" in p.stdout, p.stdout + p.stderr
    # an operator's edit survives a reinstall
    with open(cfg, "a") as f:
        f.write("# edited by the operator\n")
    out = install(d)
    assert "Kept:" in out, out
    with open(cfg) as f:
        assert f.read().endswith("# edited by the operator\n")
    shutil.rmtree(d)


def test_unit_hardened():
    """The unit as configured: `systemd-analyze security --offline=yes` at most 2.5 (the
    Debian package's unit, verified with its binary in place: test_debian)."""
    unit = os.path.join(BUILD, "roomd.service")
    p = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--threshold=25", unit],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for roomd.service: ([\d.]+)", p.stdout)
    assert p.returncode == 0 and m and float(m.group(1)) <= 2.5, p.stdout[-1500:] + p.stderr
    with open(unit) as f:
        text = f.read()
    for must in ("CapabilityBoundingSet=\n", "SystemCallFilter=@system-service",
                 "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6", "UMask=0027"):
        assert must in text, must


def test_make_targets_split():
    """`make install` compiles and installs, never calls deps.sh (no apt, no npm); `make run`
    installs the build packages, `make test` the test ones too (make -n: what each runs)."""
    def plan(*target):
        p = subprocess.run(["make", "-n", "-C", SOURCE, *target, f"BUILD={TMP}/b"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return p.stdout
    inst = plan("install", f"DESTDIR={TMP}/d", "PREFIX=/usr")
    assert "cmake --install" in inst and "-DCMAKE_INSTALL_PREFIX=/usr" in inst, inst
    assert not re.search(r"deps\.sh|apt|npm|dpkg", inst), inst
    assert "scripts/deps.sh build" in plan("run") and "scripts/deps.sh build" in plan("deps")
    assert "scripts/deps.sh test" in plan("test") and "scripts/deps.sh test" in plan("test-deps")


def test_deps_lists_split():
    """scripts/deps.sh on a machine with nothing installed (dpkg-query, apt-get, npm and flock
    replaced on PATH by recorders): `build` installs the build packages only (no server,
    browser, packaging tool or npm), `test` those and the test ones, and npm ci."""
    shims = os.path.join(TMP, "deps-shims")
    os.makedirs(shims, exist_ok=True)
    log = os.path.join(TMP, "deps.log")
    for name, body in (("dpkg-query", "exit 1"), ("apt-get", f'echo "apt-get $*" >> {log}'),
                       ("npm", f'echo "npm $*" >> {log}'), ("sudo", 'exec "$@"'),
                       ("flock", 'shift; exec "$@"')):
        with open(os.path.join(shims, name), "w") as f:
            f.write(f"#!/bin/sh\n{body}\n")
        os.chmod(os.path.join(shims, name), 0o755)

    def deps(mode):
        if os.path.exists(log):
            os.remove(log)
        p = subprocess.run(["sh", os.path.join(SOURCE, "scripts", "deps.sh"), mode],
                           capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, PATH=shims + ":" + os.environ["PATH"]))
        assert p.returncode == 0, p.stderr
        with open(log) as f:
            return f.read()
    build = deps("build")
    installed = build.split("install", 1)[1].split()
    assert "libmicrohttpd-dev" in installed and "cmake" in installed, build
    for pkg in ("mariadb-server", "redis-server", "nats-server", "chromium", "prometheus",
                "libcmocka-dev", "debhelper", "lintian", "golang-go"):
        assert pkg not in installed, (pkg, build)
    assert "npm " not in build, build
    test = deps("test")
    for pkg in ("libmicrohttpd-dev", "mariadb-server", "nats-server", "chromium", "debhelper",
                "lintian", "golang-github-nats-io-go-nats-dev", "libcmocka-dev"):
        assert pkg in test, (pkg, test)


if __name__ == "__main__":
    run([test_layout_and_files, test_config_loads_and_survives_reinstall, test_unit_hardened,
         test_make_targets_split, test_deps_lists_split])
