# Rules of the source tree that a compiler does not check.

# Every variable goes through the table of settings (common/settings/): a getenv elsewhere would read
# a variable that doctor does not check and the README does not list. The test doubles are exempt:
# they read their own FAKE_* variables.
getenv_only_in_settings() {
  local hits
  hits=$(cd "$ROOT" && grep -rnE '\b(secure_)?getenv *\(' common shim tools include \
           --include='*.cpp' --include='*.h' --include='*.c' | grep -v '^common/settings/env.cpp:')
  expect_eq "$hits" "" "getenv calls outside common/settings/env.cpp"
}
check "no getenv outside common/settings/env.cpp (every variable is a row of settings.def)" getenv_only_in_settings

# Facts the code relies on are in docs/ (a reader has no ../shared): no citation of a file outside
# the repository.
no_citations_outside_the_repository() {
  local hits
  hits=$(cd "$ROOT" && git grep -nE '\b(FACTS|DESIGN)\.md\b' -- ':!BENCHMARKS.md' ':!tests/integration/t_lint.sh' 2>/dev/null)
  expect_eq "$hits" "" "citations of FACTS.md or DESIGN.md"
}
check "no citation of FACTS.md or DESIGN.md (the facts are in docs/)" no_citations_outside_the_repository

# The format is the checked-in .clang-format's (applied to the whole tree once): a change that
# breaks it shows here rather than as noise in the next person's diff.
formatted() {
  local files
  files=$(cd "$ROOT" && git ls-files '*.cpp' '*.h' '*.c' | grep -v '^tests/fuzz/corpus')
  (cd "$ROOT" && clang-format --dry-run --Werror $files) 2>&1 | head -20
  return "${PIPESTATUS[0]}"
}
if command -v clang-format >/dev/null; then
  check "every C and C++ file is formatted as .clang-format says" formatted
else
  skip "every C and C++ file is formatted as .clang-format says" "no clang-format on this machine"
fi

# The runner counts a test file that does not exist as a failure (a misspelt name once passed as
# "0 passed, 0 failed").
runner_fails_on_a_missing_file() {
  local out
  if out=$(bash "$ROOT/tests/integration/run.sh" t_no_such_file 2>&1); then
    echo "run.sh exited 0 for a missing file: $out"; return 1
  fi
  expect_contains "$out" "t_no_such_file.sh: no such test file"
}
check "the runner fails on a test file that does not exist" runner_fails_on_a_missing_file

# The floors (docs/architecture.md, "The floors"): no include runs up from a folder to one above it,
# no folders include each other, and every folder of common/ and shim/ has its place in the list.
floors_hold() {
  python3 "$ROOT/tests/lint/floors.py" "$ROOT"
}
check "no include runs up the floors of docs/architecture.md, and every folder is placed" floors_hold

# The check itself fails on an include that runs up and on a folder left out: a copy of the tree with
# one of each.
floors_check_fails() {
  local copy out
  copy=$(mktemp -d)
  (cd "$ROOT" && git ls-files -z shim common docs/architecture.md | xargs -0 cp --parents -t "$copy")
  git -C "$copy" init -q && git -C "$copy" add -A
  sed -i '1i #include "shim/hooks/hook_table.h"' "$copy/shim/base/clock.cpp"
  mkdir "$copy/shim/attic" && echo '#pragma once' > "$copy/shim/attic/old.h" && git -C "$copy" add -A
  out=$(python3 "$ROOT/tests/lint/floors.py" "$copy") && { echo "floors.py passed a tree that breaks it"; rm -rf "$copy"; return 1; }
  rm -rf "$copy"
  expect_contains "$out" "shim/base/clock.cpp:1: includes shim/hooks/hook_table.h, a floor above shim/base" &&
    expect_contains "$out" "shim/attic: a folder docs/architecture.md does not place" &&
    expect_contains "$out" "a cycle of includes between folders"
}
check "the floors check fails on an include that runs up and on a folder it cannot place" floors_check_fails

# Every key of the report format (common/report/schema.h: the keys and the rows' columns) is in
# docs/report-schema.md, so a field added to the writer is not one a reader of the document cannot find.
schema_keys_documented() {
  python3 "$ROOT/tests/lint/schema_keys.py"
}
check "every key of common/report/schema.h is in docs/report-schema.md" schema_keys_documented

# The check fails on a document that lacks a key: a copy without "self_view".
schema_keys_check_fails() {
  local doc out
  doc=$(mktemp)
  sed 's/"self_view"/"view_of_self"/' "$ROOT/docs/report-schema.md" > "$doc"
  out=$(python3 "$ROOT/tests/lint/schema_keys.py" "$ROOT/common/report/schema.h" "$doc") &&
    { echo "schema_keys.py passed a document without self_view"; rm -f "$doc"; return 1; }
  rm -f "$doc"
  expect_contains "$out" "lacks the key \"self_view\""
}
check "the schema keys check fails on a document that lacks a key" schema_keys_check_fails

# Long functions are split by what they do (issue 31): at most 2 production functions over 80 lines,
# none over 120 (tests/lint/function_length.py).
functions_short() {
  python3 "$ROOT/tests/lint/function_length.py" "$ROOT"
}
check "at most 2 production functions are over 80 lines and none over 120" functions_short

# The check fails on a function over 120 lines: a copy of the tree with one planted.
function_length_check_fails() {
  local copy out
  copy=$(mktemp -d)
  (cd "$ROOT" && git ls-files -z common shim tools | xargs -0 cp --parents -t "$copy")
  git -C "$copy" init -q
  { echo 'int planted_long_function(int x) {'; for ((i = 0; i < 125; i++)); do echo "    x += $i;"; done
    echo '    return x;'; echo '}'; } > "$copy/tools/planted.cpp"
  git -C "$copy" add -A
  out=$(python3 "$ROOT/tests/lint/function_length.py" "$copy") && { echo "function_length.py passed a tree that breaks it"; rm -rf "$copy"; return 1; }
  rm -rf "$copy"
  expect_contains "$out" "tools/planted.cpp:1  planted_long_function" && expect_contains "$out" "1 over 120"
}
check "the function length check fails on a function over 120 lines" function_length_check_fails
