# SPDX-License-Identifier: Apache-2.0
"""test_release: what a release needs. Every tracked source file carries an SPDX line
(scripts/spdx.sh check), `spdx.sh add` writes it once in the file's comment syntax and is
idempotent; the version comes from the release tag vX.Y.Z (git describe: X.Y.Z, X.Y.Z-N-gC
after it, -dirty with changes) and without a tag or git from VERSION, which CHANGELOG.md
and debian/changelog name; `roomd --version` prints it; LICENSE is the Apache-2.0 text."""
import os
import re
import shutil
import subprocess
import tempfile

from roomd_test import BUILD, SOURCE, run

TMP = tempfile.mkdtemp(prefix="roomd-release-")


def sh(args, cwd, check=True):
    p = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)
    if check:
        assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p


def tree_copy(name):
    """The tracked files of the source tree in a fresh git repository of their own."""
    d = os.path.join(TMP, name)
    files = sh(["git", "ls-files", "-z"], SOURCE).stdout.split("\0")
    for f in filter(None, files):
        src = os.path.join(SOURCE, f)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(d, f)), exist_ok=True)
            shutil.copy2(src, os.path.join(d, f))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    sh(["git", "init", "-q"], d)
    sh(["git", "add", "-A"], d)
    sh(git + ["commit", "-qm", "copy"], d)
    return d, git


def version_of(tree):
    return sh(["cmake", f"-DSRC={tree}", "-P", os.path.join(tree, "cmake", "version.cmake")],
              tree).stderr.strip()


def read(*path):
    with open(os.path.join(*path)) as f:
        return f.read()


def test_every_source_file_has_spdx():
    p = sh([os.path.join(SOURCE, "scripts", "spdx.sh"), "check"], SOURCE, check=False)
    assert p.returncode == 0, p.stderr
    listed = sh([os.path.join(SOURCE, "scripts", "spdx.sh"), "list"], SOURCE).stdout.split()
    for must in ("src/main.c", "CMakeLists.txt", "Makefile", "proto/room_events.proto",
                 "tests/roomd_test.py", "scripts/deps.sh", "console/index.html"):
        assert must in listed, must
    assert not any(f.endswith((".md", ".json")) or f.startswith("fuzz/corpus/") for f in listed)


def test_spdx_add_is_idempotent():
    d, git = tree_copy("spdx")
    new = {"src/core/new_file.c": "int x;\n", "scripts/new.sh": "#!/bin/sh\necho hi\n",
           "tests/integ/test_new.py": '"""doc"""\n', "console/new.html": "<!doctype html>\n<p>\n",
           "proto/new.proto": 'syntax = "proto3";\n'}
    for f, text in new.items():
        with open(os.path.join(d, f), "w") as fh:
            fh.write(text)
    os.chmod(os.path.join(d, "scripts/new.sh"), 0o755)
    sh(["git", "add", "-A"], d)
    spdx = os.path.join(d, "scripts", "spdx.sh")
    p = sh([spdx, "check"], d, check=False)
    assert p.returncode == 1 and all(f in p.stderr for f in new), p.stderr
    p = sh([spdx, "add"], d)
    assert sorted(re.findall(r"^spdx: added to (\S+)$", p.stdout, re.M)) == sorted(new), p.stdout
    assert read(d, "src/core/new_file.c") == "/* SPDX-License-Identifier: Apache-2.0 */\nint x;\n"
    assert read(d, "scripts/new.sh").startswith("#!/bin/sh\n# SPDX-License-Identifier: Apache-2.0\n")
    assert os.access(os.path.join(d, "scripts/new.sh"), os.X_OK)
    assert read(d, "console/new.html").startswith("<!doctype html>\n<!-- SPDX-License-Identifier")
    assert read(d, "proto/new.proto").startswith("// SPDX-License-Identifier: Apache-2.0\n")
    # the second run changes nothing
    before = sh(["git", "status", "--porcelain"], d).stdout
    p = sh([spdx, "add"], d)
    assert p.stdout == "" and sh(["git", "status", "--porcelain"], d).stdout == before, p.stdout
    # only the new files changed: every tracked one had its line already
    changed = sh(["git", "diff", "--name-only"], d).stdout.split()
    assert sorted(changed) == sorted(new), changed
    shutil.rmtree(d)


def test_version_from_tag_or_file():
    d, git = tree_copy("version")
    number = read(d, "VERSION").strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", number), number
    assert version_of(d) == number  # no tag yet: the VERSION file
    sh(git + ["tag", "-a", "v9.8.7", "-m", "release"], d)
    assert version_of(d) == "9.8.7"
    with open(os.path.join(d, "NOTICE"), "a") as f:
        f.write("\n")
    assert version_of(d) == "9.8.7-dirty"
    sh(git + ["commit", "-qam", "after"], d)
    head = sh(["git", "rev-parse", "--short=7", "HEAD"], d).stdout.strip()
    assert version_of(d) == f"9.8.7-1-g{head}"
    shutil.rmtree(os.path.join(d, ".git"))  # a tarball: VERSION again
    assert version_of(d) == number
    shutil.rmtree(d)


def test_version_printed_and_named():
    number = read(SOURCE, "VERSION").strip()
    want = version_of(SOURCE)
    p = sh([os.path.join(BUILD, "roomd"), "--version"], BUILD)
    m = re.fullmatch(r"roomd (\S+) \(commit (\S+)\)\n", p.stdout)
    assert m, p.stdout
    # configured from this tree: the same release (a commit since configure may add -N-g/-dirty)
    assert m.group(1).split("-")[0] == want.split("-")[0], (m.group(1), want)
    assert re.search(rf"^## \[{re.escape(number)}\] - \d{{4}}-\d\d-\d\d$",
                     read(SOURCE, "CHANGELOG.md"), re.M), "CHANGELOG.md has no section " + number
    assert "## [Unreleased]" in read(SOURCE, "CHANGELOG.md")
    deb = read(SOURCE, "debian", "changelog").splitlines()[0]
    assert re.match(rf"^roomd \({re.escape(number)}\) ", deb), deb
    lic = read(SOURCE, "LICENSE")
    assert "Apache License" in lic and "Version 2.0, January 2004" in lic
    assert "END OF TERMS AND CONDITIONS" in lic


if __name__ == "__main__":
    run([test_every_source_file_has_spdx, test_spdx_add_is_idempotent,
         test_version_from_tag_or_file, test_version_printed_and_named])
