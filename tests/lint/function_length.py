#!/usr/bin/env python3
"""The length of every function in the production code (common/, shim/, tools/).

A function's length is its lines from the line of its opening brace's signature to its closing brace.
Lambdas and local classes count with the function they are in. This prints every function over SOFT
lines, longest first, and exits 1 when more than ALLOWED are over SOFT or any is over HARD: a long
function should be split by what it does (issue 31).

    tests/lint/function_length.py [ROOT] [--list]   ROOT: the repository (default: this file's grandparent)
                                                    --list: print every function over SOFT and exit 0
"""
import os
import re
import subprocess
import sys

SOFT, HARD, ALLOWED = 80, 120, 2
SOURCES = ('.c', '.cpp', '.h')
# Scopes that hold functions rather than being one.
CONTAINER = re.compile(r'\b(namespace|class|struct|union|enum)\b[^;()]*$|extern\s+"C"\s*$')


def code_only(text):
    """The text with comments, strings and character literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(')' + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append(' ' * (j + 1 - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def functions(path, text):
    """(name, first line, line count) of each function defined at namespace or class scope."""
    code = code_only(text)
    scopes = []  # each: (kind, start line, head)
    head_start, line = 0, 1
    for i, c in enumerate(code):
        if c == '\n':
            line += 1
        elif c in ';{}':
            head = code[head_start:i]
            inside_function = any(kind == 'function' for kind, _, _ in scopes)
            if c == '{':
                h = ' '.join(head.split())
                if inside_function:
                    kind = 'inner'
                elif CONTAINER.search(h) or not h.endswith((')', 'const', 'override', 'noexcept', 'final')) \
                        and not re.search(r'\)\s*(->\s*[\w:<>,\s*&]+)?$', h) and not re.search(r'\)\s*:', h):
                    kind = 'container' if CONTAINER.search(h) or not h else 'inner'
                else:
                    kind = 'function'
                first = line - head.strip().count('\n') if kind == 'function' else line
                scopes.append((kind, first, h))
            elif c == '}' and scopes:
                kind, first, h = scopes.pop()
                if kind == 'function' and not any(k == 'function' for k, _, _ in scopes):
                    name = re.search(r'([~\w:]+(?:operator\S*)?)\s*\(', h)
                    yield (name.group(1) if name else h[:40]), first, line - first + 1
            head_start = i + 1


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    files = subprocess.run(['git', 'ls-files', 'common', 'shim', 'tools'], cwd=root, capture_output=True,
                           text=True, check=True).stdout.split()
    long = []
    for path in files:
        if path.endswith(SOURCES):
            with open(os.path.join(root, path), encoding='utf-8', errors='replace') as f:
                text = f.read()
            long += [(n, path, first, name) for name, first, n in functions(path, text) if n > SOFT]
    long.sort(reverse=True)
    for n, path, first, name in long:
        print(f'{n:4} lines  {path}:{first}  {name}')
    over_hard = [x for x in long if x[0] > HARD]
    if '--list' in sys.argv or (len(long) <= ALLOWED and not over_hard):
        return 0
    print(f'function_length: {len(long)} functions over {SOFT} lines (at most {ALLOWED} allowed), '
          f'{len(over_hard)} over {HARD} (none allowed)')
    return 1


if __name__ == '__main__':
    sys.exit(main())
