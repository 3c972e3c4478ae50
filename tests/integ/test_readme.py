# SPDX-License-Identifier: Apache-2.0
"""test_readme: the README's walk-through runs top to bottom. The first ```sh block of
"## Using it" is run by bash, as written, against a fresh roomd started on
configs/local.yaml (its port and ./var moved to a temp dir); every curl's HTTP status is
checked against the `# 200` comment ending its line (one status per curl on the line)."""
import os
import re
import subprocess
import tempfile

from roomd_test import SOURCE, Roomd, free_port, run

TMP = tempfile.mkdtemp(prefix="roomd-readme-")


def walkthrough():
    with open(os.path.join(SOURCE, "README.md")) as f:
        text = f.read()
    part = text[text.index("## Using it"):]
    start = part.index("```sh\n") + len("```sh\n")
    return part[start:part.index("```", start)]


def expected(block):
    """The statuses the comments promise, in order; every curl line has its comment."""
    want = []
    for line in block.replace("\\\n", " ").splitlines():
        if line.lstrip().startswith("#") or "curl" not in line:
            continue
        m = re.search(r"#\s*((?:\d{3}\s*)+)$", line)
        assert m, f"README curl line without its status comment: {line}"
        codes = m.group(1).split()
        assert len(codes) == line.count("curl "), f"one status per curl: {line}"
        want += [int(c) for c in codes]
    return want


def local_config(port, admin_port, tmp):
    with open(os.path.join(SOURCE, "configs", "local.yaml")) as f:
        text = f.read()
    assert '"127.0.0.1:8080"' in text and '"127.0.0.1:8081"' in text and "./var/" in text
    text = text.replace('"127.0.0.1:8080"', f'"127.0.0.1:{port}"')
    text = text.replace('"127.0.0.1:8081"', f'"127.0.0.1:{admin_port}"')
    text = text.replace("./var/", tmp + "/var/")
    os.makedirs(os.path.join(tmp, "var"), exist_ok=True)
    path = os.path.join(tmp, "local.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def test_walkthrough_statuses():
    block = walkthrough()
    want = expected(block)
    assert len(want) >= 15, want
    port, admin_port = free_port(), free_port()
    rd = Roomd(tmp=TMP, port=port, overrides={"admin": {"listen": f"127.0.0.1:{admin_port}"}})
    rd.cfg_path = local_config(port, admin_port, TMP)  # the shipped config, not the harness's
    rd.log_path = os.path.join(TMP, "var", "roomd.log")
    rd.start()
    try:
        # each curl prints its status on a line of its own after the body
        script = ("curl() { command curl -w '\\n@@status %{http_code}\\n' \"$@\"; }\n" +
                  block.replace("http://127.0.0.1:8080", f"http://127.0.0.1:{port}")
                  .replace("http://127.0.0.1:8081", f"http://127.0.0.1:{admin_port}"))
        p = subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        got = [int(x) for x in re.findall(r"^@@status (\d{3})$", p.stdout, re.M)]
        assert got == want, f"statuses {got} != README's {want}\n{p.stdout[-3000:]}"
        # the gift was paid for by the top-up
        assert '"balance":1000' in p.stdout and '"gift_total":30' in p.stdout, p.stdout[-2000:]
    finally:
        assert rd.stop() == 0


if __name__ == "__main__":
    run([test_walkthrough_statuses])
