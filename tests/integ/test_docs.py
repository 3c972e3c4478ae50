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
   a fresh roomd."""
import glob
import json
import os
import re
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


if __name__ == "__main__":
    run([test_config_keys_exist, test_yaml_examples_use_keys, test_every_curl_line_runs,
         test_roomctl_lines_parse])
