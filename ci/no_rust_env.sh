# shellcheck shell=bash
# Sourced: defines `no_rust CMD...`, which runs CMD the way a user without Rust would: PATH without
# any directory that holds cargo, rustc or rustup, CARGO_HOME/RUSTUP_HOME pointed at empty folders
# (nothing can find or download a toolchain), no RUSTUP_TOOLCHAIN/CARGO/RUSTC overrides.

_no_rust_home="$(mktemp -d)"
mkdir -p "$_no_rust_home/cargo" "$_no_rust_home/rustup"
_no_rust_path=""
IFS=: read -ra _dirs <<<"$PATH"
for _d in "${_dirs[@]}"; do
    [ -n "$_d" ] || continue
    if [ -e "$_d/cargo" ] || [ -e "$_d/rustc" ] || [ -e "$_d/rustup" ]; then
        continue
    fi
    _no_rust_path="${_no_rust_path:+$_no_rust_path:}$_d"
done
unset _dirs _d

no_rust() {
    env -u RUSTUP_TOOLCHAIN -u CARGO -u RUSTC -u RUSTC_WRAPPER -u CARGO_TARGET_DIR \
        PATH="$_no_rust_path" CARGO_HOME="$_no_rust_home/cargo" RUSTUP_HOME="$_no_rust_home/rustup" "$@"
}

if no_rust sh -c 'command -v cargo || command -v rustc || command -v rustup'; then
    echo "no_rust_env: a Rust tool is still reachable" >&2
    exit 1
fi
