#!/usr/bin/env bash
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
du -sh .gpubin .gl
