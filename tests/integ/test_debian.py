# SPDX-License-Identifier: Apache-2.0
"""test_debian: the Debian packages from the tree. `dpkg-buildpackage -us -uc -b` on a copy of
the tracked files builds roomd and roomd-tools, with no package manager or npm process on the
way (its install step is `make install DESTDIR=debian/tmp PREFIX=/usr`; apt-get, apt, npm,
npx and sudo are replaced on PATH by programs that record the call and fail); lintian reports
no error; Depends come from shlibs (no server), the servers are Suggests.

The .debs are then installed with `dpkg -i` into a scratch root: an overlay of this machine's
root (its writes land in a temp dir; the machine is not changed) entered with chroot in a
private mount namespace. There: the user roomd exists, the unit's ExecStart, config,
StateDirectory and LogsDirectory are where the config and the package put them,
`systemd-analyze verify` passes and `systemd-analyze security --offline=yes` is at most 2.5;
roomd runs as user roomd with no capability and no new privileges, on HTTPS with TLS files
of /etc/roomd readable only by its group, writes its SQLite file and log where the unit
allows, says READY=1 to NOTIFY_SOCKET and reopens its log on SIGHUP. `dpkg --purge` leaves
nothing behind but dpkg's own records."""
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import http.client

from roomd_test import SOURCE, free_port, run, wait_until

TMP = tempfile.mkdtemp(prefix="roomd-deb-")
ROOT = os.path.join(TMP, "root")
STATE = {}


def sh(args, timeout=120, check=True, **kw):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)
    if check:
        assert p.returncode == 0, (args, p.stdout[-3000:], p.stderr[-3000:])
    return p


def version():
    with open(os.path.join(SOURCE, "debian", "changelog")) as f:
        return re.match(r"roomd \(([^)]+)\)", f.readline()).group(1)


def build():
    """Copies the tracked files (as they are in the work tree) and builds the packages there."""
    src = os.path.join(TMP, f"roomd-{version()}")
    files = sh(["git", "ls-files", "-z"], cwd=SOURCE).stdout.split("\0")
    for f in filter(None, files):
        if os.path.isfile(os.path.join(SOURCE, f)):
            os.makedirs(os.path.dirname(os.path.join(src, f)), exist_ok=True)
            shutil.copy2(os.path.join(SOURCE, f), os.path.join(src, f))
    shims = os.path.join(TMP, "shims")
    os.makedirs(shims)
    calls = os.path.join(TMP, "package-manager-calls")
    for name in ("apt-get", "apt", "aptitude", "npm", "npx", "sudo", "pip", "pip3"):
        with open(os.path.join(shims, name), "w") as f:
            f.write(f"#!/bin/sh\necho \"{name} $*\" >> {calls}\nexit 1\n")
        os.chmod(os.path.join(shims, name), 0o755)
    env = dict(os.environ, PATH=shims + ":" + os.environ["PATH"], DEB_BUILD_OPTIONS="parallel=2")
    p = subprocess.run(["dpkg-buildpackage", "-us", "-uc", "-b"], cwd=src, env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert not os.path.exists(calls), "package manager called: " + open(calls).read()
    assert "make install DESTDIR=" in p.stdout or "install DESTDIR=" in p.stdout, p.stdout[-2000:]
    arch = sh(["dpkg", "--print-architecture"]).stdout.strip()
    STATE["debs"] = {n: os.path.join(TMP, f"{n}_{version()}_{arch}.deb") for n in ("roomd", "roomd-tools")}
    STATE["changes"] = os.path.join(TMP, f"roomd_{version()}_{arch}.changes")
    for d in STATE["debs"].values():
        assert os.path.isfile(d), d


def field(deb, name):
    return sh(["dpkg-deb", "-f", deb, name]).stdout.strip()


def test_lintian_and_fields():
    p = sh(["lintian", "--fail-on", "error", STATE["changes"]], timeout=600, check=False)
    assert p.returncode == 0 and not re.search(r"^E: ", p.stdout, re.M), p.stdout + p.stderr
    print("  lintian:", p.stdout.strip() or "nothing to say")
    roomd, tools = STATE["debs"]["roomd"], STATE["debs"]["roomd-tools"]
    dep = field(roomd, "Depends")
    assert "libc6" in dep and "libmicrohttpd" in dep and "libnats" in dep, dep  # shlibs
    for server in ("mariadb-server", "redis-server", "nats-server"):
        assert server not in dep and server in field(roomd, "Suggests"), server
    files = set(re.findall(r"\S+$", sh(["dpkg-deb", "-c", roomd]).stdout, re.M))
    for want in ("./usr/sbin/roomd", "./etc/roomd/roomd.yaml", "./lib/systemd/system/roomd.service",
                 "./etc/logrotate.d/roomd", "./usr/share/man/man8/roomd.8.gz",
                 "./usr/share/roomd/roomd.env.example", "./usr/share/doc/roomd/copyright"):
        assert want in files, (want, sorted(files))
    tfiles = set(re.findall(r"\S+$", sh(["dpkg-deb", "-c", tools]).stdout, re.M))
    for want in ("./usr/sbin/roomctl", "./usr/sbin/roomd_consumer", "./usr/share/man/man8/roomctl.8.gz", "./usr/share/man/man8/roomd_consumer.8.gz"):
        assert want in tfiles, (want, sorted(tfiles))
    assert "./usr/sbin/roomd" not in tfiles and "./usr/sbin/roomctl" not in files
    ctrl = os.path.join(TMP, "ctrl")
    sh(["dpkg-deb", "-e", roomd, ctrl])
    with open(os.path.join(ctrl, "conffiles")) as f:
        conffiles = f.read().split()
    assert "/etc/roomd/roomd.yaml" in conffiles and "/etc/logrotate.d/roomd" in conffiles, conffiles


# --- the scratch root -----------------------------------------------------------------------

def enter_scratch_root():
    """A private mount namespace for this process (its mounts end with it) and ROOT: an overlay
    of / whose writes go to TMP/upper, with /dev and /proc."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.unshare(0x00020000) == 0, os.strerror(ctypes.get_errno())  # CLONE_NEWNS
    sh(["mount", "--make-rprivate", "/"])
    for d in ("upper", "work", "root"):
        os.makedirs(os.path.join(TMP, d))
    sh(["mount", "-t", "overlay", "overlay", "-o",
        f"lowerdir=/,upperdir={TMP}/upper,workdir={TMP}/work", ROOT])
    sh(["mount", "--rbind", "/dev", os.path.join(ROOT, "dev")])
    sh(["mount", "-t", "proc", "proc", os.path.join(ROOT, "proc")])


def inroot(cmd, check=True, timeout=300):
    return sh(["chroot", ROOT, "sh", "-c", cmd], timeout=timeout, check=check,
              env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def rooted(path):
    return os.path.join(ROOT, path.lstrip("/"))


def test_install_in_scratch_root():
    enter_scratch_root()
    assert inroot("getent passwd roomd", check=False).returncode != 0, "roomd user on the machine"
    # into the scratch root's own /tmp (the machine's /tmp may be another file system,
    # which the overlay of / does not show)
    os.makedirs(rooted("/tmp/roomd-debs"), exist_ok=True)
    for d in STATE["debs"].values():
        shutil.copy(d, rooted("/tmp/roomd-debs"))
    debs = " ".join("/tmp/roomd-debs/" + os.path.basename(d) for d in STATE["debs"].values())
    inroot(f"dpkg -i {debs}")
    assert inroot("dpkg-query -W -f='${Status}' roomd").stdout == "install ok installed"
    pw = inroot("getent passwd roomd").stdout.strip().split(":")
    assert pw[5] == "/var/lib/roomd" and pw[6].endswith("nologin"), pw
    with open(rooted("/lib/systemd/system/roomd.service")) as f:
        unit = f.read()
    STATE["unit"] = unit
    exec_start = re.search(r"^ExecStart=(\S+) -c (\S+)$", unit, re.M)
    assert exec_start, unit
    exe, cfg = exec_start.groups()
    assert os.access(rooted(exe), os.X_OK) and os.path.isfile(rooted(cfg)), (exe, cfg)
    assert re.search(r"^User=roomd$", unit, re.M) and re.search(r"^StateDirectory=roomd$", unit, re.M)
    assert re.search(r"^LogsDirectory=roomd$", unit, re.M), unit
    with open(rooted(cfg)) as f:
        text = f.read()
    # the config's writable paths are the unit's StateDirectory and LogsDirectory
    for path in re.findall(r'(?:path|log_file|consumer_store_dir): "(/[^"]+)"', text):
        assert path.startswith(("/var/lib/roomd/", "/var/log/roomd/")), path
    for d in ("/var/lib/roomd", "/var/log/roomd"):
        st = os.stat(rooted(d))
        assert st.st_uid == int(pw[2]) and (st.st_mode & 0o777) == 0o750, (d, oct(st.st_mode))
    # the enable link dh_installsystemd's postinst made, in the scratch root only
    assert os.path.islink(rooted("/etc/systemd/system/multi-user.target.wants/roomd.service"))
    assert "roomd" in inroot("man -w roomd").stdout and "roomctl" in inroot("man -w roomctl").stdout
    p = inroot(f"systemd-analyze verify {'/lib/systemd/system/roomd.service'}", check=False)
    assert p.returncode == 0 and "roomd.service" not in p.stderr, p.stdout + p.stderr
    p = inroot("systemd-analyze security --offline=yes --threshold=25 "
               "/lib/systemd/system/roomd.service", check=False)
    m = re.search(r"Overall exposure level for roomd.service: ([\d.]+)", p.stdout)
    assert p.returncode == 0 and m and float(m.group(1)) <= 2.5, p.stdout[-1500:] + p.stderr
    print("systemd-analyze security:", m.group(1))


def https_get(port, path):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    c = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=ctx)
    c.request("GET", path)
    r = c.getresponse()
    return r.status, r.read()


def test_daemon_runs_as_the_unit_says():
    """The packaged daemon as the unit starts it: user roomd, no capabilities, no new
    privileges, its environment file; TLS files root:roomd 0640 under /etc/roomd."""
    tls = "/etc/roomd/tls"
    inroot(f"mkdir -p {tls} && cd {tls} && openssl req -x509 -newkey rsa:2048 -nodes -days 2 "
           "-subj /CN=127.0.0.1 -keyout key.pem -out cert.pem 2>/dev/null && "
           "chown root:roomd key.pem cert.pem && chmod 0640 key.pem cert.pem")
    with open(rooted("/etc/roomd/roomd.yaml")) as f:
        text = f.read()
    port, admin = free_port(), free_port()
    assert 'listen: "127.0.0.1:8080"' in text
    text = text.replace('listen: "127.0.0.1:8080"',
                        f'listen: "127.0.0.1:{port}"\n  tls:\n    cert_file: "{tls}/cert.pem"\n'
                        f'    key_file: "{tls}/key.pem"')
    text += f'admin:\n  listen: "127.0.0.1:{admin}"\n'
    with open(rooted("/etc/roomd/test.yaml"), "w") as f:
        f.write(text)
    unit = STATE["unit"]
    exe = re.search(r"^ExecStart=(\S+)", unit, re.M).group(1)
    pre = re.search(r"^ExecStartPre=(.*)$", unit, re.M).group(1).replace("roomd.yaml", "test.yaml")
    run_as = "setpriv --reuid=roomd --regid=roomd --init-groups --no-new-privs --bounding-set=-all " \
             "--inh-caps=-all"
    p = inroot(f"cd /var/lib/roomd && {run_as} {pre}", check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    # a notify socket (abstract: no file) as systemd gives Type=notify services
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = f"roomd-deb-test-{os.getpid()}"
    notify.bind("\0" + name)
    notify.settimeout(60)
    trace = os.path.join(TMP, "roomd.strace")
    proc = subprocess.Popen(["strace", "-f", "-qq", "-o", trace, "chroot", ROOT, "sh", "-c",
                             f"cd /var/lib/roomd && exec {run_as} {exe} -c /etc/roomd/test.yaml"],
                            env=dict(os.environ, NOTIFY_SOCKET="@" + name),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        msgs = b""
        while b"READY=1" not in msgs:
            msgs += notify.recv(4096) + b"\n"
        assert https_get(port, "/healthz")[0] == 200
        st, body = https_get(port, "/readyz")
        assert st == 200, body
        # a command: the SQLite file is written where the unit lets roomd write
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        c = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=ctx)
        c.request("POST", "/v1/rooms", json.dumps({"command_id": "d1", "owner_uid": 1, "title": "t"}),
                  {"Content-Type": "application/json"})
        assert c.getresponse().status == 201
        db = rooted("/var/lib/roomd/roomd.db")
        log = rooted("/var/log/roomd/roomd.log")
        assert os.stat(db).st_uid == os.stat(rooted("/var/lib/roomd")).st_uid
        wait_until(lambda: os.path.exists(log) and "starting" in open(log).read(), what="log")
        # SIGHUP (ExecReload): the log file moved away is opened anew
        os.rename(log, log + ".1")
        pid = int(inroot("pgrep -u roomd -x roomd").stdout.split()[0])
        os.kill(pid, signal.SIGHUP)
        wait_until(lambda: os.path.exists(log), what="log reopened after SIGHUP")
        os.kill(pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.stderr.read()[-2000:]
        sandbox_allows(trace)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        notify.close()
    # what the operator added for this test goes before the purge
    inroot(f"rm -rf {tls} /etc/roomd/test.yaml")


def syscall_groups():
    """`systemd-analyze syscall-filter`: group name -> its members (syscalls and groups)."""
    p = sh(["systemd-analyze", "syscall-filter"])
    groups, cur = {}, None
    for line in p.stdout.splitlines():
        if line.startswith("@"):
            cur = groups.setdefault(line.strip(), set())
        elif cur is not None and line.strip() and not line.strip().startswith("#"):
            cur.add(line.strip())
    return groups


def expand(groups, name, seen=None):
    seen = seen if seen is not None else set()
    out = set()
    for m in groups.get(name, ()):
        if m.startswith("@"):
            if m not in seen:
                seen.add(m)
                out |= expand(groups, m, seen)
        else:
            out.add(m)
    return out


def sandbox_allows(trace):
    """What roomd did in the run (strace from its exec on: start, TLS, a command, SIGHUP,
    SIGTERM) is allowed by the unit's SystemCallFilter=, RestrictAddressFamilies= and
    MemoryDenyWriteExecute=: the sandbox is not tested by systemd here (not PID 1), so the
    trace is held against its rules."""
    unit = STATE["unit"]
    groups = syscall_groups()
    allowed, denied = set(), set()
    for line in re.findall(r"^SystemCallFilter=(.*)$", unit, re.M):
        target = denied if line.startswith("~") else allowed
        for item in line.lstrip("~").split():
            target |= expand(groups, item) if item.startswith("@") else {item}
    allowed -= denied
    families = set(re.search(r"^RestrictAddressFamilies=(.*)$", unit, re.M).group(1).split())
    with open(trace) as f:
        lines = f.read().splitlines()
    start = max(i for i, ln in enumerate(lines) if re.search(r'execve\("/usr/sbin/roomd"', ln))
    used, bad_af, wx = set(), set(), []
    for ln in lines[start + 1:]:
        m = re.match(r"^\d+\s+([a-z0-9_]+)\(", ln)
        if not m:
            continue
        used.add(m.group(1))
        a = re.match(r"^\d+\s+socket\((AF_[A-Z0-9]+)", ln)
        if a and a.group(1) not in families:
            bad_af.add(a.group(1))
        if re.search(r"(mmap|mprotect)\(.*PROT_WRITE\|PROT_EXEC", ln):
            wx.append(ln)
    assert len(used) > 30, sorted(used)
    assert not (used - allowed), f"syscalls the unit's filter refuses: {sorted(used - allowed)}"
    assert not bad_af, f"socket families the unit refuses: {sorted(bad_af)}"
    assert not wx, f"W+X mappings MemoryDenyWriteExecute refuses: {wx[:3]}"
    print(f"  sandbox: {len(used)} syscalls, all in the unit's filter")


ALLOWED_LEFTOVERS = re.compile(r"^(var/lib/dpkg/|var/log/dpkg\.log|var/log/apt/|var/cache/debconf/|"
                               r"etc/(passwd|group|shadow|gshadow|subuid|subgid)-?$|etc/ld\.so\.cache|"
                               r"var/cache/man/|var/lib/systemd/deb-systemd-helper-|"
                               r"var/lib/systemd/deb-systemd-user-helper-|etc/\.pwd\.lock$|run/|tmp/|root/\.)")


def test_purge_removes_what_install_made():
    inroot("dpkg --purge roomd-tools roomd")
    assert inroot("getent passwd roomd", check=False).returncode != 0
    assert inroot("getent group roomd", check=False).returncode != 0
    left = []
    upper = os.path.join(TMP, "upper")
    for d, dirs, files in os.walk(upper):
        for name in dirs + files:
            full = os.path.join(d, name)
            rel = os.path.relpath(full, upper)
            if ALLOWED_LEFTOVERS.match(rel) or ALLOWED_LEFTOVERS.match(rel + "/"):
                continue
            if os.path.isdir(full) and not os.path.islink(full) and os.path.isdir("/" + rel):
                continue  # a directory of the machine (copied up), not one the package made
            left.append(rel)
    assert not left, f"left after purge: {sorted(left)[:40]}"
    for f in ("passwd", "group"):
        with open(rooted("/etc/" + f)) as a, open("/etc/" + f) as b:
            assert a.read() == b.read(), f


def fixture_all():
    build()
    for t in (test_lintian_and_fields, test_install_in_scratch_root,
              test_daemon_runs_as_the_unit_says, test_purge_removes_what_install_made):
        t0 = time.time()
        t()
        print(f"ok   {t.__name__} ({time.time() - t0:.2f}s)", flush=True)


def test_package():
    try:
        fixture_all()
    finally:
        for m in ("proc", "dev"):
            subprocess.run(["umount", "-l", os.path.join(ROOT, m)], capture_output=True)
        subprocess.run(["umount", "-l", ROOT], capture_output=True)
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    import sys
    from roomd_test import listing
    if not listing() and (os.geteuid() != 0 or not shutil.which("dpkg-buildpackage")):
        print("SKIP: needs root (mount, chroot) and dpkg-buildpackage (make test-deps)")
        sys.exit(77)
    run([test_package])
