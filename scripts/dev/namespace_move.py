"""Rewrite the tree's imports and module names to the ``medagentgym`` namespace (issue #33).

    python scripts/dev/namespace_move.py            # rewrite in place, print the files changed
    python scripts/dev/namespace_move.py --check    # change nothing; exit 1 and list the files it would change
    python scripts/dev/namespace_move.py --bare     # also list strings that are exactly an old name, to review

``sandbox``, ``rewards``, ``env_client`` and ``medcopilot`` are imported as ``medagentgym.sandbox`` ... (the folders
stay where they are: ``medagentgym/<name>`` are symlinks to them; the old names are deprecated aliases, see
medagentgym/_compat.py). Deterministic and idempotent: a second run changes nothing, and it can run again on a tree
that merged more code written with the old names. What it rewrites, in every git-tracked text file:

* Python code (by tokens, so strings and comments are told apart from code):
  ``import sandbox`` -> ``from medagentgym import sandbox`` (the same name bound), ``import sandbox as s`` ->
  ``from medagentgym import sandbox as s``, ``import sandbox.pool as p`` -> ``import medagentgym.sandbox.pool as p``,
  ``import sandbox.pool`` -> ``import medagentgym.sandbox.pool`` (and, where the file binds no ``sandbox`` itself,
  its uses ``sandbox.pool.X`` -> ``medagentgym.sandbox.pool.X``), ``from sandbox.x import y`` ->
  ``from medagentgym.sandbox.x import y``; relative imports are left alone;
* strings and comments in Python, and the text of every other file (docs and their code blocks, recipes,
  Makefile, shell scripts, Dockerfiles, TOML): a dotted name ``sandbox.NAME`` whose NAME is a module of the
  package or a name its ``__init__`` defines (so ``python -m sandbox.x``, ``from sandbox.worker import main`` in
  a boot line, ``"env_client.rollout:rollout"``, ``mock.patch("sandbox.pool.Pool")``, entry points and pickled
  dotted names all move), an ``import sandbox``/``from sandbox import`` statement inside a string or a code
  block, and a call naming the package alone (``import_module("sandbox")``, ``__import__("sandbox")``,
  ``find_spec``, ``importlib.resources.files``);
* never a path (``sandbox/pool.py``, ``medcopilot/recipes``), a word in prose, a config key (``"sandbox":``), a
  name already under ``medagentgym.`` or after another dot (``args.sandbox``), nor the files that must keep the
  old names (:data:`KEEP`).
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OLD = ("sandbox", "rewards", "env_client", "medcopilot")
NEW = "medagentgym"
#: Files that name the old imports on purpose: the alias machinery, its tests, this script.
KEEP = {"medagentgym/_compat.py", "tests/test_namespace.py", "scripts/dev/namespace_move.py"}
#: What is text (by suffix or name); everything else tracked is left alone.
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".sh", ".cfg", ".ini", ".rst"}
TEXT_NAMES = {"Makefile", "Dockerfile", ".dockerignore"}
_CALLS = ("import_module", "find_spec", "files", "import_package")  # not __import__: it returns the top package
_ID = r"[A-Za-z_][A-Za-z0-9_]*"


def package_names(root: Path = ROOT) -> dict[str, set[str]]:
    """``{old name: names NAME for which ``old.NAME`` means our package}``: its modules and subpackages (on disk)
    and the names its ``__init__`` binds (definitions, imports, ``__all__``)."""
    found: dict[str, set[str]] = {}
    for old in OLD:
        folder = root / old
        names: set[str] = set()
        for child in folder.iterdir() if folder.is_dir() else ():
            if child.suffix == ".py" and child.stem != "__init__":
                names.add(child.stem)
            elif child.is_dir() and (child / "__init__.py").exists():
                names.add(child.name)
        init = folder / "__init__.py"
        if init.exists():
            tree = ast.parse(init.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    names.update(t.id for t in targets if isinstance(t, ast.Name))
                    if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                        names.update(e.value for e in getattr(node.value, "elts", [])
                                     if isinstance(e, ast.Constant) and isinstance(e.value, str))
        names -= {"annotations", "medagentgym", "TYPE_CHECKING", "__getattr__", "__dir__", "__all__"}
        found[old] = names
    return found


class Rewriter:
    """The text rules (module docstring), built once from the tree's package contents."""

    def __init__(self, names: dict[str, set[str]]):
        #: ``(line, string)`` of the string literals of the last :meth:`python` call that are exactly an old name and
        #: were left alone (a config key, a backend, a logger, a folder, or a module name only a person can tell)
        self.bare: list[tuple[int, str]] = []
        dotted = "|".join(f"{re.escape(old)}\\.(?:{'|'.join(sorted(map(re.escape, n)))})\\b"
                          for old, n in sorted(names.items()) if n)
        alt = "|".join(OLD)
        # sandbox.pool, sandbox.make_pool, sandbox._jail ... not after a word char, a dot, a slash or a dash
        self.dotted = re.compile(rf"(?<![\w./\-])(?=(?:{dotted}))({alt})\.")
        # `import sandbox` / `import sys, sandbox` / `from sandbox import x` written out in text
        self.text_import = re.compile(rf"(?<![\w.])((?:import|from)\s+(?:{_ID}(?:\.{_ID})*(?:\s+as\s+{_ID})?\s*,\s*)*)"
                                      rf"({alt})\b(?![\w.\-/])")
        # import_module("sandbox") and friends
        self.call = re.compile(rf"""(\b(?:{'|'.join(_CALLS)})\(\s*)(["'])({alt})\2""")

    def text(self, s: str) -> str:
        s = self.dotted.sub(lambda m: f"{NEW}.{m.group(1)}.", s)
        s = self.call.sub(lambda m: f"{m.group(1)}{m.group(2)}{NEW}.{m.group(3)}{m.group(2)}", s)
        for _ in range(64):  # one old name of a list per pass (`import sys, medcopilot, sandbox`), till none is left
            moved = self.text_import.sub(self._text_import, s)
            if moved == s:
                break
            s = moved
        return s

    @staticmethod
    def _text_import(m: re.Match) -> str:
        head, name = m.group(1), m.group(2)
        line_start = m.string.rfind("\n", 0, m.start()) + 1
        if head.startswith("import") and re.search(r"\bfrom\s+[\w.]+\s+$", m.string[line_start:m.start()]):
            return m.group(0)  # `from x import sandbox`: a name inside x, not our package
        if head.startswith("import") and not head[6:].strip():  # `import sandbox` alone: bind the same name
            return f"from {NEW} import {name}"
        if head.startswith("import"):  # `import sys, sandbox`: the same names bound
            aliased = re.match(r"\s+as\b", m.string[m.end():])
            return f"{head}{NEW}.{name}" + ("" if aliased else f" as {name}")
        return f"{head}{NEW}.{name}"

    # ------------------------------------------------------------------------------------------ Python source
    def python(self, source: str) -> str:
        """Rewrite one Python file: import statements by tokens, then strings and comments as text."""
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
        edits: list[tuple[tuple[int, int], tuple[int, int], str]] = []  # (start, end, replacement)
        bound_plain = set()  # old names the file binds itself (import sandbox [as sandbox])
        self.bare = []
        dotted_only = set()  # old names imported as `import sandbox.x` with no `as`
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            prev = tokens[i - 1] if i else None
            at_stmt = prev is None or prev.type in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT,
                                                    tokenize.ENCODING) or (prev.type == tokenize.OP and prev.string in (";", ":"))
            if tok.type == tokenize.NAME and tok.string == "from" and at_stmt:
                j = i + 1
                if tokens[j].type == tokenize.NAME and tokens[j].string in OLD:
                    edits.append((tokens[j].start, tokens[j].start, f"{NEW}."))
                i = j + 1
                continue
            if tok.type == tokenize.NAME and tok.string == "import" and at_stmt:
                j = i + 1
                while True:  # one clause: dotted name [as alias], then ',' or the end
                    first = tokens[j]
                    parts = [first]
                    k = j + 1
                    while tokens[k].type == tokenize.OP and tokens[k].string == "." and tokens[k + 1].type == tokenize.NAME:
                        parts.append(tokens[k + 1])
                        k += 2
                    alias = None
                    if tokens[k].type == tokenize.NAME and tokens[k].string == "as":
                        alias = tokens[k + 1]
                        k += 2
                    if first.type == tokenize.NAME and first.string in OLD:
                        if len(parts) == 1:
                            # `import sandbox [as x]` -> `from medagentgym import sandbox [as x]` (one clause only)
                            if tokens[i + 1] is first and not (tokens[k].type == tokenize.OP and tokens[k].string == ","):
                                edits.append((tok.start, tok.end, f"from {NEW} import"))
                                bound_plain.add(alias.string if alias else first.string)
                            else:
                                raise SystemExit(f"namespace_move: cannot rewrite `import {first.string}` in a list of "
                                                 f"imports (line {first.start[0]}): split the statement first")
                        else:
                            edits.append((first.start, first.start, f"{NEW}."))
                            if alias is None:
                                dotted_only.add(first.string)
                    if tokens[k].type == tokenize.OP and tokens[k].string == ",":
                        j = k + 1
                        continue
                    i = k
                    break
                continue
            if (tok.type == tokenize.STRING and i >= 2 and tokens[i - 1].string == "("
                    and tokens[i - 2].type == tokenize.NAME and tokens[i - 2].string in _CALLS
                    and tok.string[1:-1] in OLD and tok.string[0] == tok.string[-1] and tok.string[0] in "\"'"):
                edits.append((tok.start, tok.end, f"{tok.string[0]}{NEW}.{tok.string[1:-1]}{tok.string[0]}"))
                i += 1
                continue
            if tok.type == tokenize.STRING and re.fullmatch(rf"([\"'])(?:{'|'.join(OLD)}):{_ID}\1", tok.string):
                edits.append((tok.start, tok.end, f"{tok.string[0]}{NEW}.{tok.string[1:]}"))  # "env_client:Env"
                i += 1
                continue
            if tok.type == tokenize.STRING and tok.string[1:-1] in OLD and tok.string[0] == tok.string[-1]:
                self.bare.append((tok.start[0], tok.string))
            if tok.type in (tokenize.STRING, tokenize.COMMENT) or tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
                new = self.text(tok.string)
                if new != tok.string:
                    edits.append((tok.start, tok.end, new))
            i += 1
        # uses of a name bound only by `import sandbox.x`: `sandbox.x.f()` -> `medagentgym.sandbox.x.f()`
        for name in sorted(dotted_only - bound_plain):
            for n, tok in enumerate(tokens):
                if (tok.type == tokenize.NAME and tok.string == name and n + 1 < len(tokens)
                        and tokens[n + 1].string == "." and not (n and tokens[n - 1].string == ".")
                        and not _in_import(tokens, n)):
                    edits.append((tok.start, tok.start, f"{NEW}."))
        return _apply(source, edits)


def _in_import(tokens: list, n: int) -> bool:
    """Whether token ``n`` is part of an import statement (its logical line starts with import/from)."""
    k = n
    while k > 0 and tokens[k - 1].type not in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING) \
            and not (tokens[k - 1].type == tokenize.OP and tokens[k - 1].string == ";"):
        k -= 1
    while k < n and tokens[k].type in (tokenize.NL, tokenize.COMMENT):  # comment lines before the statement
        k += 1
    return tokens[k].type == tokenize.NAME and tokens[k].string in ("import", "from")


def _apply(source: str, edits: list) -> str:
    if not edits:
        return source
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def pos(rc: tuple[int, int]) -> int:
        return offsets[rc[0] - 1] + rc[1]

    out, last = [], 0
    for start, end, text in sorted(set(edits), key=lambda e: (pos(e[0]), pos(e[1]), e[2])):
        a, b = pos(start), pos(end)
        if a < last:
            continue
        out.append(source[last:a])
        out.append(text)
        last = b
    out.append(source[last:])
    return "".join(out)


def tracked_files(root: Path = ROOT) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    files = []
    for rel in sorted(filter(None, listed.decode().split("\0"))):
        path = root / rel
        if rel in KEEP or path.is_symlink() or not path.is_file():
            continue
        if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES:
            files.append(path)
    return files


def rewrite(path: Path, rewriter: Rewriter) -> str:
    text = path.read_text(encoding="utf-8")
    return rewriter.python(text) if path.suffix == ".py" else rewriter.text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file would change")
    parser.add_argument("--bare", action="store_true",
                        help="also list the string literals that are exactly an old name (left alone: review them)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository to rewrite (default: this one)")
    args = parser.parse_args(argv)
    rewriter = Rewriter(package_names(args.root))
    changed = []
    for path in tracked_files(args.root):
        old = path.read_text(encoding="utf-8")
        new = rewrite(path, rewriter)
        if args.bare and path.suffix == ".py":
            rel = path.relative_to(args.root).as_posix()
            for line, literal in rewriter.bare:
                print(f"{rel}:{line}: {literal} left as is (a module name? then write 'medagentgym.{literal[1:-1]}')",
                      file=sys.stderr)
        if new != old:
            changed.append(path.relative_to(args.root).as_posix())
            if not args.check:
                tmp = path.with_name(path.name + ".namespace-move.tmp")
                tmp.write_text(new, encoding="utf-8")
                tmp.chmod(path.stat().st_mode & 0o7777)
                tmp.replace(path)
    for rel in changed:
        print(rel)
    print(f"namespace_move: {len(changed)} file(s) {'would change' if args.check else 'rewritten'}", file=sys.stderr)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
