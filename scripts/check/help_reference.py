#!/usr/bin/env python3
"""Usage: scripts/check/help_reference.py TPLLAMA [--readme src/README.md] [--write]

src/README.md's flag reference is each command's --help, verbatim: a block

    <!-- help: run -->
    ```text
    ...what `tpllama run --help` prints...
    ```

per command (and `<!-- help: -->` for `tpllama --help`). This checks every block against the
binary TPLLAMA and fails (exit 1), printing a diff, where one differs or a command has none; the
CTest test readme_flag_reference runs it. --write rewrites the blocks from the binary instead (run
it after changing a flag's help, and read the diff).
"""

import argparse
import difflib
import re
import subprocess
import sys

BLOCK = re.compile(r"<!-- help: ?([a-z]*) -->\n```text\n(.*?)```\n", re.S)


def commands(tpllama):
    """The subcommands `tpllama --help` lists."""
    out = subprocess.run([tpllama, "--help"], capture_output=True, text=True, check=True).stdout
    listed = out.split("Subcommands:", 1)[1] if "Subcommands:" in out else ""
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


def help_text(tpllama, command):
    args = [tpllama] + ([command] if command else []) + ["--help"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        sys.exit(f"{' '.join(args)} exited {p.returncode}: {p.stderr[-2000:]}")
    return p.stdout.rstrip("\n") + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tpllama")
    ap.add_argument("--readme", default="src/README.md")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    with open(a.readme, encoding="utf-8") as f:
        text = f.read()
    documented = {m.group(1): m.group(2) for m in BLOCK.finditer(text)}
    wanted = [""] + commands(a.tpllama)
    failures = []
    for command in wanted:
        name = command or "(tpllama --help)"
        actual = help_text(a.tpllama, command)
        if command not in documented:
            failures.append(f"{a.readme} has no <!-- help: {command} --> block for {name}")
            continue
        if documented[command] != actual:
            if a.write:
                text = text.replace(f"<!-- help: {command} -->\n```text\n{documented[command]}```\n",
                                    f"<!-- help: {command} -->\n```text\n{actual}```\n")
                print(f"rewrote the block of {name}")
                continue
            diff = difflib.unified_diff(documented[command].splitlines(), actual.splitlines(),
                                        f"{a.readme} ({name})", "--help", lineterm="")
            failures.append("\n".join(diff))
    for command in documented:
        if command not in wanted:
            failures.append(f"{a.readme} documents '{command}', which tpllama --help does not list")
    if a.write:
        with open(a.readme, "w", encoding="utf-8") as f:
            f.write(text)
    if failures:
        print("\n\n".join(failures))
        print(f"FAIL: {len(failures)} flag reference block(s) of {a.readme} differ from --help "
              "(scripts/check/help_reference.py TPLLAMA --write rewrites them)")
        sys.exit(1)
    print(f"the flag reference of {a.readme} is the --help of all {len(wanted)} commands")


if __name__ == "__main__":
    main()
