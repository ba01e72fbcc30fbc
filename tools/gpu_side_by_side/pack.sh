#!/usr/bin/env bash
# usage: pack.sh [BUILD_DIR [--tests]]
# Packs a Release gpt2vk and the shared libraries a CUDA image may lack into .gpubin/ (ignored
# by git), for tools/gpu_side_by_side/run.sh on a lent GPU machine. The C and C++ runtimes stay
# out: the machine's own are newer, and an older libstdc++ on the path would break PyTorch.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target gpt2vk
grep -qx '/.gpubin/' .git/info/exclude 2>/dev/null || echo '/.gpubin/' >> .git/info/exclude
rm -rf .gpubin && mkdir -p .gpubin/lib
cp "$build/gpt2vk" .gpubin/
ldd "$build/gpt2vk" | awk '$3 ~ /^\// {print $3}' |
  grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' | xargs -r cp -L -t .gpubin/lib
cp -L "$(ldconfig -p | awk '/libvulkan.so.1 / {print $NF; exit}')" .gpubin/lib/  # volk dlopens it
# The GL dispatch libraries NVIDIA's Vulkan driver needs: a CUDA image may not have them.
grep -qx '/.gl/' .git/info/exclude || echo '/.gl/' >> .git/info/exclude
mkdir -p .gl && (cd .gl && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
# --tests (after the build dir): the test binary too, stripped, from build/ (RelWithDebInfo),
# for run.sh's op tests on the GPU.
if [[ ${2:-} == --tests ]]; then
  cmake --build build -j"$(nproc)" --target gpt2vk_tests
  strip --strip-debug -o .gpubin/gpt2vk_tests build/tests/gpt2vk_tests
fi
# The Khronos validation layer, which the tests require (VK_LAYER_PATH in run.sh).
if [[ ${2:-} == --tests ]]; then
  mkdir -p .gpubin/lib/layer
  cp /usr/lib/x86_64-linux-gnu/libVkLayer_khronos_validation.so .gpubin/lib/layer/
  sed 's#"library_path": *"[^"]*"#"library_path": "./libVkLayer_khronos_validation.so"#' \
    /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json \
    > .gpubin/lib/layer/VkLayer_khronos_validation.json
fi
# ICU's data alone is 31 MB: the libraries travel compressed (device_env.sh unpacks them), so
# that the carry stays within the device tool's 64 MiB.
tar czf .gpubin/lib.tar.gz -C .gpubin lib && rm -rf .gpubin/lib
du -sh .gpubin .gl
