#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# spdx.sh check|add|list: the SPDX-License-Identifier line of every tracked source file.
#   list   the files that must carry one (tracked, by name; see is_source below)
#   check  prints each of them that lacks one in its first 5 lines; exit 1 when any does
#   add    writes the line into each that lacks it (idempotent: a file that has one is untouched),
#          as the file's comment syntax has it, after a #! line or an <!doctype>; then runs check
# Run from anywhere inside the repository; only `git ls-files` decides what is tracked, so a file
# must be added (git add) before `add` sees it.
set -eu
ID="SPDX-License-Identifier: Apache-2.0"
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"

# The comment that carries the line, by file name; empty: not a source file (data, corpora,
# JSON, which has no comments, and the licence texts themselves).
comment_for() {
    case "$1" in
    LICENSE | NOTICE | VERSION | *.md | *.json | fuzz/corpus/* | debian/changelog | debian/copyright | \
        debian/source/* | debian/*.install | debian/*.dirs | debian/*.links | debian/*.manpages | \
        debian/*.docs | debian/*.lintian-overrides | */go.sum | examples/*/vendor/*) echo "" ;;
    *.c | *.h | *.css) echo "/* $ID */" ;;
    *.proto | *.js | *.go | */go.mod) echo "// $ID" ;;
    *.html) echo "<!-- $ID -->" ;;
    *.8) echo ".\\\" $ID" ;;
    *.py | *.sh | *.cmake | *.in | *.yaml | *.yml | *.env.example | *.toml | *.conf | \
        CMakeLists.txt | */CMakeLists.txt | Makefile | */Makefile | .clang-format | .gitignore | .dockerignore | \
        */.gitignore | .ci/* | deploy/logrotate/* | debian/rules | debian/control | debian/*.postinst | \
        debian/*.postrm | debian/*.preinst | debian/*.prerm | debian/*.sysusers | debian/*.tmpfiles | \
        debian/*.service | debian/*.logrotate | debian/watch | *.sysusers | */Containerfile | Containerfile | \
        *compose*.yaml) echo "# $ID" ;;
    *) echo "" ;;
    esac
}

list() {
    git ls-files | while IFS= read -r f; do
        [ -f "$f" ] && [ -n "$(comment_for "$f")" ] && echo "$f"
    done
    return 0
}

has_id() { head -n 5 "$1" | grep -q "SPDX-License-Identifier:"; }

check() {
    bad=0
    for f in $(list); do
        if ! has_id "$f"; then
            echo "spdx: no SPDX-License-Identifier in the first 5 lines: $f" >&2
            bad=1
        fi
    done
    return $bad
}

add() {
    for f in $(list); do
        has_id "$f" && continue
        line=$(comment_for "$f")
        first=$(head -n 1 "$f")
        tmp="$f.spdx.$$"
        case "$first" in
        '#!'* | '<!doctype'* | '<!DOCTYPE'* | '%YAML'*)
            { printf '%s\n%s\n' "$first" "$line"; tail -n +2 "$f"; } >"$tmp" ;;
        *) { printf '%s\n' "$line"; cat "$f"; } >"$tmp" ;;
        esac
        chmod --reference="$f" "$tmp"
        mv "$tmp" "$f"
        echo "spdx: added to $f"
    done
    check
}

case "${1:-}" in
list) list ;;
check) check ;;
add) add ;;
*) echo "usage: $0 check|add|list" >&2; exit 2 ;;
esac
