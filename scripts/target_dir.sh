# Sourced by the scripts that run a built binary: `target_dir` prints where cargo puts this
# workspace's builds. cargo itself answers, so CARGO_TARGET_DIR, `build.target-dir` in a
# .cargo/config.toml and the default ./target all work alike.
target_dir() {
  local dir
  dir=$(cargo metadata --format-version 1 --no-deps 2>/dev/null |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
  if [[ -z $dir ]]; then
    echo "cannot find cargo's target directory (cargo metadata failed)" >&2
    return 1
  fi
  printf '%s\n' "$dir"
}
