# SPDX-License-Identifier: Apache-2.0
"""test_docs: the pages of docs/ (every *.md there, whichever pages exist) do not drift.

1. Every config key a page names exists: each `inline code` span of docs/*.md and README.md
   is searched for dotted names starting with a config section (`store.mysql.host`,
   `store.driver: mysql`); each must be a key of `roomd --print-config-doc` or a section of
   one (`store.mysql`, `store.mysql.*`). Proto packages (`roomd.v1`) and the JSON fields of
   ALLOWED are not keys. A ```yaml block that is a config (only sections at its top) names
   only keys too.
2. Every curl line of a page runs. A fenced block holding a curl command is either
   - a script: each curl line ends with the statuses it answers (`# 200`, one per curl; the
     README's convention, tests/integ/test_readme.py), run by bash as written; or
   - a transcript: `$ curl ...` lines each followed by the JSON it prints; each runs, answers
     200 and prints JSON.
   The blocks of one page run in order against one fresh roomd on configs/local.yaml (its
   ports moved: 127.0.0.1:8080 / localhost:8080 and :8081 in the text are rewritten), with
   the overrides of a `<!-- test_docs: {JSON} -->` comment on the line before a block merged
   into that config (e.g. auth.mode jwt); variables set by a block's assignment lines
   (`H=...; R=...`) hold for the page's later blocks. A curl line in any other shape fails the test,
   naming page and line.
3. Every roomctl command line of a page (and of README.md) is one roomctl accepts (no usage error), run against
   a fresh roomd.
4. Every other command line of a page runs or is listed: the `$ ` lines, the lines of ```sh
   blocks and the command lines of indented code blocks (first word a program: on PATH, in
   KNOWN, or a path under scripts/, build*/, deploy/, tests/). `roomd --check-config` /
   `--version` / `--print-config-doc` lines run against the built binary and a transcript's
   output (the lines up to the next `$ `) must be what they print; the gRPC client block and the
   compose env copy run; every other one must match ONE entry of NOT_RUN, with the reason it
   cannot run here. A command line neither run nor listed fails the test, as does an entry of
   NOT_RUN that matches no line (no stale reasons)."""
import glob
import json
import os
import re
import shutil
import subprocess
import tempfile

import yaml

from roomd_test import BUILD, SOURCE, Roomd, free_port, merge, run

TMP = tempfile.mkdtemp(prefix="roomd-docs-")
ALLOWED = {"room.members", "room.bans"}  # JSON fields of a command's answer (docs/http.md)


def pages():
    return sorted(glob.glob(os.path.join(SOURCE, "docs", "*.md")))


def config_keys():
    p = subprocess.run([os.path.join(BUILD, "roomd"), "--print-config-doc"], capture_output=True,
                       text=True, timeout=20)
    assert p.returncode == 0, p.stderr
    keys = set(re.findall(r"^\| `([a-z0-9_.]+)` \|", p.stdout, re.M))
    assert len(keys) > 100, len(keys)
    sections = {".".join(k.split(".")[:i]) for k in keys for i in range(1, k.count(".") + 1)}
    return keys, sections


def test_config_keys_exist():
    keys, sections = config_keys()
    tops = sorted({k.split(".")[0] for k in keys})
    name = re.compile(r"(?<![\w/.-])((?:%s)(?:\.(?:[a-z0-9_]+|\*))+)" % "|".join(tops))
    bad = []
    for page in pages() + [os.path.join(SOURCE, "README.md")]:
        with open(page) as f:
            text = f.read()
        text = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text,
                      flags=re.M | re.S)  # fenced blocks: YAML nests keys, no dotted names
        for span in re.finditer(r"`([^`\n]+)`", text):
            for m in name.finditer(span.group(1)):
                k = re.sub(r"\.\*$", "", m.group(1))
                if k in keys or k in sections or k in ALLOWED or re.search(r"\.v\d+(\.|$)", k):
                    continue
                if re.search(r"\.(md|c|h|py|ya?ml|proto|js|go|json|sh|db|conf|service)$", k):
                    continue  # a file name
                line = text[:span.start()].count("\n") + 1
                bad.append(f"{os.path.relpath(page, SOURCE)}:{line}: `{k}` is no config key")
    assert not bad, "\n".join(bad)


def flatten(d, prefix=""):
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            yield from flatten(v, path + ".")
        else:
            yield path


def test_yaml_examples_use_keys():
    """A fenced ```yaml block of a page that is a config (its top level only config sections)
    names only keys: every path in it is a key or a section of one."""
    keys, sections = config_keys()
    tops = {k.split(".")[0] for k in keys}
    bad, checked = [], 0
    for page in pages():
        with open(page) as f:
            text = f.read()
        for m in re.finditer(r"^```ya?ml\n(.*?)^```", text, re.M | re.S):
            try:
                doc = yaml.safe_load(m.group(1))
            except yaml.YAMLError:
                continue  # a fragment with "..." in it
            if not isinstance(doc, dict) or not set(doc) <= tops:
                continue
            checked += 1
            line = text[:m.start()].count("\n") + 1
            for path in flatten(doc):
                if path not in keys and path not in sections:
                    bad.append(f"{os.path.relpath(page, SOURCE)}:{line}: `{path}` is no config key")
    assert not bad, "\n".join(bad)
    assert checked >= 2, checked


# --- the curl blocks -----------------------------------------------------------------------

def blocks(page):
    """(first line number, overrides, lines) of each fenced block holding a curl command."""
    with open(page) as f:
        lines = f.read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            body = lines[i + 1:j]
            if any(re.match(r"\s*(\$ )?curl ", ln) for ln in body):
                over = {}
                m = re.match(r"<!-- test_docs: (.*) -->$", lines[i - 1]) if i > 0 else None
                if m:
                    over = json.loads(m.group(1))
                out.append((i + 2, over, body))
            i = j + 1
        else:
            if re.match(r"\s*(\$ )?curl ", lines[i]):
                out.append((i + 1, None, [lines[i]]))  # outside a fenced block: refused below
            i += 1
    return out


def statuses(body, where):
    want = []
    for n, line in enumerate("\n".join(body).replace("\\\n", " ").split("\n")):
        if line.lstrip().startswith("#") or "curl " not in line:
            continue
        m = re.search(r"#\s*((?:\d{3}\s*)+)$", line)
        assert m, f"{where}: a curl line without its status comment (# 200): {line.strip()}"
        codes = m.group(1).split()
        assert len(codes) == line.count("curl "), f"{where}: one status per curl: {line}"
        want += [int(c) for c in codes]
    return want


def local_config(tmp, port, admin_port, over):
    with open(os.path.join(SOURCE, "configs", "local.yaml")) as f:
        cfg = yaml.safe_load(f)
    cfg["http"]["listen"] = f"127.0.0.1:{port}"
    cfg["admin"]["listen"] = f"127.0.0.1:{admin_port}"
    text = json.dumps(merge(cfg, over or {})).replace("./var/", tmp + "/var/")
    os.makedirs(os.path.join(tmp, "var"), exist_ok=True)
    path = os.path.join(tmp, "docs.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def ports_moved(text, port, admin_port):
    for host in ("http://127.0.0.1", "http://localhost", "127.0.0.1", "localhost"):
        text = text.replace(f"{host}:8080", f"http://127.0.0.1:{port}")
        text = text.replace(f"{host}:8081", f"http://127.0.0.1:{admin_port}")
    return text.replace("http://http://", "http://")


def run_page(page, found):
    rel = os.path.relpath(page, SOURCE)
    over = next((o for _, o, _ in found if o), {})
    port, admin_port = free_port(), free_port()
    tmp = tempfile.mkdtemp(dir=TMP)
    env = dict(os.environ, ROOMD_JWT_SECRET=os.urandom(32).hex())
    rd = Roomd(tmp=tmp, port=port, overrides={"admin": {"listen": f"127.0.0.1:{admin_port}"}})
    rd.cfg_path = local_config(tmp, port, admin_port, over)
    rd.log_path = os.path.join(tmp, "var", "roomd.log")
    rd.start(env=env)
    ran = 0
    try:
        prelude = "curl() { command curl -w '\\n@@status %{http_code}\\n' \"$@\"; }\n"
        for first, o, body in found:
            # a page's later blocks use the variables its earlier ones set (H=..; R=..)
            sets = [ln for ln in body if re.match(r"^[A-Za-z_]\w*=[^ ]", ln) and "curl" not in ln]
            where = f"{rel}:{first}"
            assert o is not None, f"{where}: a curl line outside a fenced block"
            if any(ln.startswith("$ ") for ln in body):  # a transcript
                cmds = [ln[2:] for ln in body if ln.startswith("$ ")]
                script, want = prelude + "\n".join(cmds), [200] * len(cmds)
            else:
                script, want = prelude + "\n".join(body), statuses(body, where)
            script = ports_moved(script, port, admin_port)
            prelude += "".join(ln + "\n" for ln in sets)
            p = subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True,
                               timeout=120, env=env)
            assert p.returncode == 0, f"{where}: exit {p.returncode}: {p.stderr[-1500:]}"
            got = [int(x) for x in re.findall(r"^@@status (\d{3})$", p.stdout, re.M)]
            assert got == want, f"{where}: statuses {got}, the page says {want}\n{p.stdout[-2500:]}"
            if any(ln.startswith("$ ") for ln in body):
                for out in re.split(r"\n?@@status \d{3}\n", p.stdout)[:-1]:
                    json.loads(out)  # each prints JSON
            ran += len(want)
    finally:
        assert rd.stop() == 0
    return ran


def test_every_curl_line_runs():
    total = 0
    for page in pages():
        found = blocks(page)
        if found:
            n = run_page(page, found)
            print(f"  {os.path.relpath(page, SOURCE)}: {n} curl calls as documented")
            total += n
    assert total >= 30, total


def roomctl_lines():
    """(page:line, argv) of every roomctl command line of docs/ (indented or fenced), its
    optional [...] parts left out; the synopsis (COMMAND, CONFIG placeholders) is not one."""
    out = []
    for page in pages() + [os.path.join(SOURCE, "README.md")]:
        with open(page) as f:
            for n, line in enumerate(f, 1):
                m = re.match(r"^\s*(?:\$ )?(?:build/)?roomctl (.*)$", line.rstrip())
                if not m or re.search(r"\b[A-Z]{4,}\b(?!_)", re.sub(r'"[^"]*"', "", m.group(1))):
                    continue
                args = re.sub(r"\s*\[[^\]]*\]", "", m.group(1)).split("#")[0]
                out.append((f"{os.path.relpath(page, SOURCE)}:{n}", args))
    return out


def test_roomctl_lines_parse():
    """Each roomctl line of docs/ is a command roomctl accepts (no usage error, exit 2): run
    against a fresh roomd on configs/local.yaml (its store, or --url its admin listener)."""
    found = roomctl_lines()
    assert len(found) >= 10, found
    port, admin_port = free_port(), free_port()
    tmp = tempfile.mkdtemp(dir=TMP)
    rd = Roomd(tmp=tmp, port=port, overrides={"admin": {"listen": f"127.0.0.1:{admin_port}"}})
    rd.cfg_path = local_config(tmp, port, admin_port, {})
    rd.log_path = os.path.join(tmp, "var", "roomd.log")
    rd.start()
    bad = []
    try:
        for where, args in found:
            args = re.sub(r"-c \S+", f"-c {rd.cfg_path}", args)
            if "-c " not in args and "--url" not in args:
                args = f"-c {rd.cfg_path} {args}"
            args = ports_moved(args, port, admin_port)
            p = subprocess.run(f"{os.path.join(BUILD, 'roomctl')} {args}", shell=True,
                               capture_output=True, text=True, timeout=30, cwd=tmp)
            if p.returncode == 2 or "usage:" in p.stderr or "bad option" in p.stderr:
                bad.append(f"{where}: roomctl {args}: exit {p.returncode}: {p.stderr.strip()[:300]}")
    finally:
        assert rd.stop() == 0
    assert not bad, "\n".join(bad)


# --- every other command line --------------------------------------------------------------

KNOWN = {"roomd", "roomctl", "roomd_consumer", "make", "apt", "apt-get", "dpkg", "systemctl",
         "journalctl", "docker", "podman", "node", "install", "sudo", "mysql", "redis-cli", "nats"}

# (page, regex on the command, why it does not run here): the only command lines not run
NOT_RUN = [
    ("docs/bus.md", r"^roomd_consumer -c configs/cloud\.yaml ",
     "the consumer of configs/cloud.yaml: its 3-node JetStream, MySQL and Tencent IM "
     "(tests/integ/test_consumer*.py run roomd_consumer on local servers)"),
    ("docs/cluster.md", r"^scripts/servers\.sh start build-asan/servers",
     "the cluster walk-through: starts MariaDB/Redis/NATS of a build-asan tree "
     "(tests/integ/test_*cluster*.py do it on their own ports)"),
    ("docs/cluster.md", r"^ROOMD_NATS_CLUSTER_PORTS=.* scripts/nats_cluster\.sh start ",
     "starts a 3-node JetStream cluster on fixed ports (the cluster tests do it)"),
    ("docs/cluster.md", r"^build-asan/roomd -c node0\.yaml ",
     "three nodes on node0..2.yaml of the cluster walk-through: a cluster"),
    ("docs/cluster.md", r"^scripts/nats_cluster\.sh (kill|restart|stop) /tmp/natsc",
     "acts on the cluster the walk-through started"),
    ("docs/container.md", r"^make deb\b",
     "dpkg-buildpackage writes the .debs to ../, outside the tree; tests/integ/test_debian.py "
     "builds them in a copy"),
    ("docs/container.md", r"^apt install \.\./roomd_",
     "installs packages: would change this machine (test_debian.py installs in a scratch root)"),
    ("docs/container.md", r"^install -m 0640 -o root -g roomd ",
     "writes /etc/roomd as root after the package made the roomd group: changes the machine"),
    ("docs/container.md", r"^podman (build|run) ",
     "needs a container engine (none here); tests/integ/test_container.py checks the files"),
    ("docs/container.md", r"^docker compose ",
     "needs a container engine and the images; test_container.py checks compose.yaml"),
    ("docs/http.md", r"^grep '\"request_id\":\"gw-7f3a\"' var/roomd\.log",
     "greps the logs of a two-node deployment for a gateway's request id"),
]


def is_command(line):
    words = re.sub(r"^\$ ", "", line.strip())
    words = re.sub(r"^([A-Z_][A-Z0-9_]*=(\"[^\"]*\"|\S*)\s+)+", "", words).split()
    if not words:
        return False
    w = words[0]
    if w in ("roomd", "roomd_consumer") and not (len(words) > 1 and words[1].startswith("-")):
        return False  # options only: "roomd node0" of a diagram is a name
    return (w in KNOWN or re.match(r"(\./)?(scripts|build[\w-]*|deploy|tests)/\S", w) is not None
            or (re.match(r"^[a-z][\w.-]*$", w) is not None and shutil.which(w) is not None))


def command_lines():
    """(page:line, command, documented output or None) of every command line of docs/*.md."""
    out = []
    for page in pages():
        rel = os.path.relpath(page, SOURCE)
        with open(page) as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            ln = lines[i]
            if ln.startswith("```"):
                lang, j = ln[3:].strip(), i + 1
                while j < len(lines) and not lines[j].startswith("```"):
                    j += 1
                body = lines[i + 1:j]
                if any(b.startswith("$ ") for b in body):  # a transcript
                    for k, b in enumerate(body):
                        if b.startswith("$ "):
                            rest = body[k + 1:]
                            n = next((x for x, r in enumerate(rest) if r.startswith("$ ")), len(rest))
                            out.append((f"{rel}:{i + 2 + k}", b[2:], "\n".join(rest[:n])))
                elif lang in ("sh", "bash", "shell", "console"):
                    out.append((f"{rel}:{i + 2}", "\n".join(body), None))  # one script
                elif lang == "":
                    out += [(f"{rel}:{i + 2 + k}", b.strip(), None)
                            for k, b in enumerate(body) if is_command(b)]
                i = j + 1
                continue
            if ln.startswith("$ "):
                out.append((f"{rel}:{i + 1}", ln[2:], None))
            elif ln.startswith("    ") and i > 0 and lines[i - 1].strip() == "":
                j = i
                while j < len(lines) and (lines[j].startswith("    ") or lines[j].strip() == ""):
                    j += 1
                k = i
                while k < j:  # the block's logical lines, "\" continuations joined
                    first, cmd = k, lines[k].strip()
                    while cmd.endswith("\\") and k + 1 < j:
                        k += 1
                        cmd = cmd[:-1].rstrip() + " " + lines[k].strip()
                    if is_command(cmd):
                        out.append((f"{rel}:{first + 1}", cmd.split(" #")[0].strip(), None))
                    k += 1
                i = j
                continue
            i += 1
    return out


def run_check_config(where, cmd, want):
    """A `roomd --check-config|--version|--print-config-doc` line, run as written in a copy of
    configs/ with ./var made (as `make run` does; bad.yaml: a file whose line 12, column 18 is `outbox_worker.poll_interval: 0`),
    with none of the secrets' environment variables set; the output must be the transcript's."""
    tmp = tempfile.mkdtemp(dir=TMP)
    for f in ("configs",):
        shutil.copytree(os.path.join(SOURCE, f), os.path.join(tmp, f))
    os.makedirs(os.path.join(tmp, "var"))
    with open(os.path.join(tmp, "bad.yaml"), "w") as f:
        f.write("# a config with one bad value\n" + "#\n" * 9 + "outbox_worker:\n  poll_interval: 0\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("ROOMD_MYSQL_PASSWORD", "ROOMD_ADMIN_TOKEN", "ROOMD_JWT_SECRET",
                        "TIM_SECRET_KEY")}
    env["PATH"] = BUILD + os.pathsep + env.get("PATH", "")
    p = subprocess.run(["bash", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=30, cwd=tmp, env=env)  # the terminal's order
    got = p.stdout.strip()
    if want is None:
        assert p.returncode == 0, f"{where}: {cmd}: exit {p.returncode}: {got[:500]}"
    else:
        assert got == want.strip(), f"{where}: {cmd}\nprints:\n{got}\nthe page says:\n{want}"


def run_grpc_block(where, script):
    """The gRPC client block of docs/grpc.md against a fresh roomd on configs/local.yaml (its
    gRPC listener moved off 9090): each call answers, GetRoom the room CreateRoom made."""
    port, admin_port, grpc_port = free_port(), free_port(), free_port()
    tmp = tempfile.mkdtemp(dir=TMP)
    rd = Roomd(tmp=tmp, port=port, overrides={"admin": {"listen": f"127.0.0.1:{admin_port}"}})
    rd.cfg_path = local_config(tmp, port, admin_port, {"grpc": {"listen": f"127.0.0.1:{grpc_port}"}})
    rd.log_path = os.path.join(tmp, "var", "roomd.log")
    rd.start()
    try:
        p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c",
                            script.replace("127.0.0.1:9090", f"127.0.0.1:{grpc_port}")],
                           capture_output=True, text=True, timeout=60, cwd=SOURCE)
    finally:
        assert rd.stop() == 0
    assert p.returncode == 0, f"{where}: exit {p.returncode}: {p.stderr[-1500:]}"
    assert '"r9"' in p.stdout and "gRPC" in p.stdout, f"{where}: {p.stdout[-1500:]}"


def run_env_copy(where, cmd):
    """`cp deploy/roomd.env.example deploy/compose/roomd.env`: run in a copy of deploy/."""
    tmp = tempfile.mkdtemp(dir=TMP)
    shutil.copytree(os.path.join(SOURCE, "deploy"), os.path.join(tmp, "deploy"))
    p = subprocess.run(["bash", "-e", "-c", cmd], capture_output=True, text=True, timeout=30, cwd=tmp)
    assert p.returncode == 0, f"{where}: {cmd}: {p.stderr}"
    assert os.path.getsize(os.path.join(tmp, "deploy", "compose", "roomd.env")) > 0, where


def test_every_command_line_runs_or_is_listed():
    found = command_lines()
    bad, used, ran, listed = [], set(), 0, 0
    for where, cmd, want in found:
        first = cmd.split("\n")[0]
        if re.search(r"(^|[;&|]\s*)curl ", cmd, re.M) or re.match(r"(build/)?roomctl ", first):
            continue  # test_every_curl_line_runs / test_roomctl_lines_parse
        if re.match(r"roomd --(check-config|version|print-config-doc)\b", first):
            run_check_config(where, cmd, want)
            ran += 1
        elif "tests/standins/grpc_client.js" in cmd:
            run_grpc_block(where, cmd)
            ran += 1
        elif re.match(r"cp deploy/roomd\.env\.example deploy/compose/roomd\.env$", cmd):
            run_env_copy(where, cmd)
            ran += 1
        else:
            hit = [n for n, (pg, rx, _) in enumerate(NOT_RUN)
                   if where.startswith(pg + ":") and re.search(rx, first)]
            if hit:
                used.update(hit)
                listed += 1
            else:
                bad.append(f"{where}: `{first}` is neither run nor in NOT_RUN")
    bad += [f"NOT_RUN entry {pg} {rx!r} matches no command line"
            for n, (pg, rx, _) in enumerate(NOT_RUN) if n not in used]
    print(f"  {ran} command lines run, {listed} listed in NOT_RUN")
    assert not bad, "\n".join(bad)
    assert ran >= 4, ran


if __name__ == "__main__":
    run([test_config_keys_exist, test_yaml_examples_use_keys, test_every_curl_line_runs,
         test_roomctl_lines_parse, test_every_command_line_runs_or_is_listed])
