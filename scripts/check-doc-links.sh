#!/usr/bin/env bash
# Fails on a broken relative link in the book (docs/src) or in the
# top-level Markdown files: a link to a file that does not exist, to a
# #heading a page does not have, or, from the book, to a file outside
# docs/src (mdBook serves only what is under src, so such a link works on
# GitHub and breaks in the built book). Also fails on a page of docs/src
# that SUMMARY.md does not list (mdBook would not build it). mdBook 0.4
# checks none of this itself.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'EOF'
import os, re, sys

BOOK = os.path.normpath("docs/src")
files = sorted(os.path.join(BOOK, f) for f in os.listdir(BOOK) if f.endswith(".md"))
files += [f for f in ("README.md", "ARCHITECTURE.md", "CHANGELOG.md") if os.path.exists(f)]

def prose(text):
    """The text outside fenced code blocks and inline code spans."""
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1).startswith(fence):
                fence = None
            out.append("")
            continue
        out.append("" if fence else re.sub(r"`[^`]*`", "", line))
    return out

def headings(path):
    """The ids mdBook and GitHub give the headings of a page (inline code
    in a heading is part of its id)."""
    seen, ids = {}, set()
    fence = False
    for line in open(path, encoding="utf-8").read().split("\n"):
        if re.match(r"^\s*(```|~~~)", line):
            fence = not fence
            continue
        m = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
        base = "".join(
            c.lower() if c.isalnum() or c in "_-" else "-" if c.isspace() else "" for c in text
        )
        n = seen.get(base, 0)
        seen[base] = n + 1
        ids.add(base if n == 0 else f"{base}-{n}")
    return ids

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
errors = []
for f in files:
    for n, line in enumerate(prose(open(f, encoding="utf-8").read()), 1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            where = f"{f}:{n}: {target}"
            if not os.path.exists(dest):
                errors.append(f"{where}: no such file")
                continue
            if f.startswith(BOOK + os.sep) and not dest.startswith(BOOK + os.sep):
                errors.append(f"{where}: outside docs/src, which the built book cannot link to")
                continue
            if anchor and dest.endswith(".md") and anchor not in headings(dest):
                errors.append(f"{where}: {os.path.basename(dest)} has no heading #{anchor}")

summary = open(os.path.join(BOOK, "SUMMARY.md"), encoding="utf-8").read()
listed = {os.path.normpath(os.path.join(BOOK, t)) for t in re.findall(r"\]\(([^)#]+)\)", summary)}
for f in files:
    if f.startswith(BOOK + os.sep) and not f.endswith("SUMMARY.md") and f not in listed:
        errors.append(f"{f}: not listed in docs/src/SUMMARY.md")

for e in errors:
    print(e, file=sys.stderr)
print(f"check-doc-links: {len(files)} files, {len(errors)} broken", file=sys.stderr)
sys.exit(1 if errors else 0)
EOF
