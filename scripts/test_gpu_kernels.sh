#!/usr/bin/env bash
# Tests the CubeCL fused recurrent kernels (rnn/tests/cube_kernels.rs: the PyTorch reference
# vectors per precision, kernels == CPU fused backend, sequential == recurrent, boundary
# isolation) on burn's wgpu backend over Mesa's lavapipe, a Vulkan driver that runs on the CPU:
# no GPU needed. Installs the driver when it is missing (apt-get, as root or through sudo).
# Called by .ci/run; prints the time the build and the tests took.
#
#   scripts/test_gpu_kernels.sh            # lavapipe (what CI runs)
#   RECUR_VK_ICD=any scripts/test_gpu_kernels.sh   # whatever Vulkan device wgpu prefers
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'test_gpu_kernels: %s\n' "$*" >&2; }

LVP_ICD=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json
if [[ ! -f "$LVP_ICD" ]] || ! ldconfig -p | grep -q 'libvulkan\.so\.1'; then
    say "installing Mesa's Vulkan drivers (lavapipe) and the Vulkan loader"
    sudo_cmd=()
    if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq \
        mesa-vulkan-drivers libvulkan1 >/dev/null
fi
[[ -f "$LVP_ICD" ]] || { say "error: $LVP_ICD missing after the install"; exit 1; }

# Pin the Vulkan loader to lavapipe so the result does not depend on the machine's GPUs.
if [[ "${RECUR_VK_ICD:-lavapipe}" == lavapipe ]]; then
    export VK_ICD_FILENAMES="$LVP_ICD"
fi
# lavapipe/wgpu warn when there is no session runtime directory; give them one.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"

# Only the crate that has the kernels, only their test target, and that crate unoptimised:
# the kernels run in lavapipe, not in recur-rnn, and the dev profile's opt-level 2 would
# cost ~2 of the build's minutes (154 s against 30 s for the crate on 2 cores; the tests ran
# 37 s and 26 s). The dependencies keep the dev profile, shared with the workspace's tests.
cargo_test=(cargo test --config 'profile.dev.package.recur-rnn.opt-level=0'
    -p recur-rnn --features wgpu --locked --test cube_kernels)
start=$SECONDS
"${cargo_test[@]}" --no-run
built=$SECONDS
"${cargo_test[@]}"
say "build $((built - start)) s, tests $((SECONDS - built)) s"
