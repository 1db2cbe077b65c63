# The README's table of variables is the table of settings (common/settings/settings.def), as
# `gpuguard help variables --markdown` prints it: a variable added, renamed or documented anew in one
# place and not the other fails here.

readme_table_is_the_settings_table() {
  local readme generated
  readme=$(sed -n '/^<!-- variables: made by/,/^<!-- variables: end -->/p' "$ROOT/README.md" | sed '1d;$d')
  generated=$("$CLI" help variables --markdown)
  [[ -n $readme ]] || { echo "    README.md has no table between the variables markers" >&2; return 1; }
  if [[ $readme != "$generated" ]]; then
    echo "    README.md's table differs from 'gpuguard help variables --markdown':" >&2
    diff <(echo "$readme") <(echo "$generated") | head -20 | sed 's/^/      /' >&2
    return 1
  fi
}
check "README's table of variables is the table of settings" readme_table_is_the_settings_table

help_lists_every_setting() {
  local out name
  out=$("$CLI" help variables) || return 1
  for name in $(grep -o '^SETTING(k[A-Za-z]*, "[A-Z_]*"' "$ROOT/common/settings/settings.def" | sed 's/.*"\(.*\)"/\1/'); do
    expect_contains "$out" "$name" "gpuguard help variables" || return 1
  done
}
check "gpuguard help variables lists every row of settings.def" help_lists_every_setting

help_of_a_command() {
  local out rc
  out=$("$CLI" help run); rc=$?
  expect_eq "$rc" 0 "help run's exit status" &&
    expect_contains "$out" "usage: gpuguard run" "help run" &&
    expect_contains "$out" "--limit SPEC" "help run (an option made from the table)" &&
    expect_contains "$out" "GPUGUARD_MEM_LIMIT" "help run (its variable)" || return 1
  out=$("$CLI" help nosuch 2>&1); rc=$?
  expect_eq "$rc" 2 "help nosuch's exit status" && expect_contains "$out" "no command or topic 'nosuch'" "the message"
}
check "gpuguard help run prints run's options; an unknown topic is exit 2" help_of_a_command

# Issue 20: `help SUB` answered with the top-level usage for some; now every command that `gpuguard
# help` lists answers `help SUB`, `SUB --help` and `--help SUB` with its own usage, and the README
# describes it.
every_command_has_its_help() {
  local names name out
  names=$("$CLI" help | sed -n 's/^  \([a-z][a-z-]*\)  .*/\1/p')
  [[ -n $names ]] || { echo "    no commands in 'gpuguard help'" >&2; return 1; }
  for name in $names; do
    out=$("$CLI" help "$name" 2>&1) || { echo "    help $name: exit $?: $out" >&2; return 1; }
    expect_contains "$out" "usage: gpuguard $name" "gpuguard help $name" || return 1
    out=$("$CLI" "$name" --help 2>&1) || return 1
    expect_contains "$out" "usage: gpuguard $name" "gpuguard $name --help" || return 1
    out=$("$CLI" --help "$name" 2>&1) || return 1
    expect_contains "$out" "usage: gpuguard $name" "gpuguard --help $name" || return 1
    grep -q "^\*\*\`gpuguard $name" "$ROOT/README.md" || { echo "    README.md does not describe 'gpuguard $name'" >&2; return 1; }
  done
}
check "every command answers help SUB, SUB --help and --help SUB with its usage, and is in the README" every_command_has_its_help
