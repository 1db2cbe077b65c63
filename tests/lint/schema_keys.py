#!/usr/bin/env python3
"""Every key of the report format is documented.

common/report/schema.h spells each key the writer and the readers use (namespace key) and each row's
columns (the GG_SCHEMA_<ROW>_COLUMNS lists); docs/report-schema.md shows the format. A key is documented when the
document has it as a quoted JSON string ("name"), the way its illustration spells keys and columns.
This prints each key of schema.h the document lacks and exits 1 when there is any.

    tests/lint/schema_keys.py [SCHEMA_H DOC_MD]   default: the repository's, beside this file
"""
import os
import re
import sys

STRING = re.compile(r'"([^"\\]*)"')


def schema_keys(text):
    """The keys of `namespace key` and the column names of the row layouts."""
    keys = []
    block = re.search(r'namespace key \{(.*?)\}  // namespace key', text, re.S)
    if not block:
        sys.exit('schema_keys: common/report/schema.h has no `namespace key` block')
    keys += re.findall(r'constexpr const char \w+\[\] = "([^"]+)"', block.group(1))
    for columns in re.findall(r'^#define GG_SCHEMA_\w+_COLUMNS\(X\)(.*)$', text.replace('\\\n', ' '), re.M):
        keys += re.findall(r'X\((\w+)\)', columns)
    return keys


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    schema_h, doc_md = argv[1:3] if len(argv) == 3 else (
        os.path.join(root, 'common/report/schema.h'), os.path.join(root, 'docs/report-schema.md'))
    keys = schema_keys(open(schema_h, encoding='utf-8').read())
    documented = set(STRING.findall(open(doc_md, encoding='utf-8').read()))
    missing = [k for k in dict.fromkeys(keys) if k not in documented]
    for k in missing:
        print(f'{doc_md}: lacks the key "{k}" of {schema_h}')
    return 1 if missing else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
